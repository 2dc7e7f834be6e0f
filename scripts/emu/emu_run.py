#!/usr/bin/env python3
"""Runs a static x86-64 Linux program on an emulated CPU (Bochs, through bochscpu-python).

kiln's AVX-512 code (the AVX-512 and AVX512_BF16 GEMM kernels, the 16-lane half-precision
conversions) only runs where the CPU has those instructions, and the development machines
and CI may not. This runs a test binary built with -march=sapphirerapids -static (see
scripts/emu/emu_check.sh) on Bochs's Sapphire Rapids model, instruction by instruction,
so that code runs and is checked on any x86-64 machine (about 200x slower than native).

It is a tiny Linux: the program's memory identity-mapped by 1 GiB pages and backed by
host pages on first touch; the system calls a static glibc program makes (brk/mmap,
write, open/read of host files, clocks, ...) answered here; threads run one at a time
(a new one to its end first), and OpenMP is held to one thread (OMP_THREAD_LIMIT=1).
An unsupported instruction or a fault ends the run with its address.

Usage: emu_run.py [--env K=V ...] [--max-seconds S] program [args...]
Exit status: the program's, or 124 on timeout, 125 on an emulation fault.
"""
import argparse
import ctypes
import errno
import os
import struct
import sys
import time

import bochscpu
import bochscpu.cpu
import bochscpu.memory

PAGE = 4096
PML4_GPA, PDPT_GPA = 0x1000, 0x2000          # the page tables (identity map of 0..512 GiB)
SYSCALL_GPA = 0x3000                          # LSTAR: a ud2 the exception hook recognises
STACK_TOP = 0x7F_0000_0000                    # 508 GiB, below the top of the map
MMAP_BASE = 0x10_0000_0000                    # anonymous mappings grow up from 64 GiB
CODE_SEL, DATA_SEL = 0x08, 0x10


class Exit(Exception):
    def __init__(self, code):
        self.code = code


class Machine:
    def __init__(self, env, max_seconds):
        self.pages = {}                # guest page number -> host address
        self.brk_start = self.brk = 0
        self.mmap_next = MMAP_BASE
        self.fds = {0: 0, 1: 1, 2: 2}  # guest fd -> host fd
        self.parents = []              # (state, tid, clear_tid address) of threads waiting on a clone
        self.next_tid = 1001
        self.exit_code = None
        self.fault = None
        self.deadline = time.monotonic() + max_seconds
        self.env = env
        self.sess = bochscpu.Session()
        self.sess.missing_page_handler = self.missing_page

    # ---- memory ----
    def page(self, gpa):
        n = gpa >> 12
        hva = self.pages.get(n)
        if hva is None:
            hva = bochscpu.memory.allocate_host_page()
            ctypes.memset(hva, 0, PAGE)
            bochscpu.memory.page_insert(n << 12, hva)
            self.pages[n] = hva
        return hva

    def missing_page(self, gpa):
        self.page(gpa)

    def write(self, addr, data):
        data = bytes(data)
        off = 0
        while off < len(data):
            a = addr + off
            n = min(len(data) - off, PAGE - (a & (PAGE - 1)))
            ctypes.memmove(self.page(a) + (a & (PAGE - 1)), data[off:off + n], n)
            off += n

    def read(self, addr, size):
        out = bytearray()
        while size > 0:
            n = min(size, PAGE - (addr & (PAGE - 1)))
            out += ctypes.string_at(self.page(addr) + (addr & (PAGE - 1)), n)
            addr += n
            size -= n
        return bytes(out)

    def cstring(self, addr):
        out = bytearray()
        while True:
            chunk = self.read(addr, PAGE - (addr & (PAGE - 1)))
            i = chunk.find(b"\0")
            if i >= 0:
                return bytes(out + chunk[:i]).decode()
            out += chunk
            addr += len(chunk)

    def unmap(self, addr, length):
        for n in range(addr >> 12, (addr + length + PAGE - 1) >> 12):
            hva = self.pages.pop(n, None)
            if hva is not None:
                bochscpu.memory.page_remove(n << 12)
                bochscpu.memory.release_host_page(hva)

    # ---- program ----
    def load(self, path, argv):
        elf = open(path, "rb").read()
        if elf[:4] != b"\x7fELF" or elf[4] != 2 or struct.unpack_from("<H", elf, 16)[0] != 2:
            raise SystemExit(f"emu_run: {path} is not a static (ET_EXEC) 64-bit ELF program; "
                             "build it with -static (scripts/emu/emu_check.sh does)")
        entry, phoff = struct.unpack_from("<QQ", elf, 24)
        phentsize, phnum = struct.unpack_from("<HH", elf, 54)
        phdr_addr = 0
        for i in range(phnum):
            p_type, _, off, vaddr, _, filesz, memsz, _ = struct.unpack_from("<IIQQQQQQ", elf, phoff + i * phentsize)
            if p_type == 3:
                raise SystemExit(f"emu_run: {path} needs a dynamic loader; build it with -static")
            if p_type != 1:
                continue
            self.write(vaddr, elf[off:off + filesz])
            for a in range(vaddr + filesz, vaddr + memsz, PAGE):
                self.page(a)  # zeroed .bss
            if off <= phoff < off + filesz:
                phdr_addr = vaddr + phoff - off
            self.brk = max(self.brk, (vaddr + memsz + PAGE - 1) & ~(PAGE - 1))
        self.brk_start = self.brk

        # the initial stack: argc, argv, envp, auxv (what a static glibc reads)
        sp = STACK_TOP - 0x10000

        def put(s):
            nonlocal sp
            b = s.encode() + b"\0"
            sp -= len(b)
            self.write(sp, b)
            return sp
        argv_ptrs = [put(a) for a in argv]
        env_ptrs = [put(f"{k}={v}") for k, v in self.env.items()]
        sp -= 16
        random_addr = sp
        self.write(random_addr, os.urandom(16))
        sp -= 16
        platform = sp
        self.write(platform, b"x86_64\0")
        auxv = [(3, phdr_addr), (4, phentsize), (5, phnum), (6, PAGE), (9, entry), (11, 0), (12, 0),
                (13, 0), (14, 0), (23, 0), (25, random_addr), (15, platform), (16, 0), (0, 0)]
        words = [len(argv)] + argv_ptrs + [0] + env_ptrs + [0]
        for k, v in auxv:
            words += [k, v]
        sp = (sp - 8 * len(words)) & ~0xF
        self.write(sp, struct.pack(f"<{len(words)}Q", *words))
        return entry, sp

    def start(self, entry, sp):
        # page tables: PML4[0] -> PDPT; PDPT[i] maps 1 GiB at i GiB (present, writable, user, PS)
        self.write(PML4_GPA, struct.pack("<Q", PDPT_GPA | 0x7))
        self.write(PDPT_GPA, struct.pack("<512Q", *[(i << 30) | 0x87 for i in range(512)]))
        self.write(SYSCALL_GPA, b"\x0f\x0b")  # ud2
        st = bochscpu.State()
        bochscpu.cpu.set_long_mode(st)
        st.cr3 = PML4_GPA
        st.cr0 = (1 << 0) | (1 << 1) | (1 << 4) | (1 << 5) | (1 << 16) | (1 << 31)   # PE MP ET NE WP PG
        st.cr4 = (1 << 5) | (1 << 9) | (1 << 10) | (1 << 16) | (1 << 18)               # PAE OSFXSR OSXMMEXCPT FSGSBASE OSXSAVE
        st.efer = (1 << 0) | (1 << 8) | (1 << 10) | (1 << 11)                           # SCE LME LMA NXE
        st.xcr0 = 0xE7                       # x87 SSE AVX opmask ZMM_Hi256 Hi16_ZMM
        st.star = CODE_SEL << 32             # syscall keeps ring 0's code and stack segments
        st.lstar = SYSCALL_GPA
        st.sfmask = 0
        st.mxcsr = 0x1F80
        st.fpcw = 0x37F
        st.rflags = 0x202
        st.rip, st.rsp = entry, sp
        cs = bochscpu.Segment()
        cs.present, cs.selector, cs.base, cs.limit, cs.attr = True, CODE_SEL, 0, 0xFFFFFFFF, 0x209B
        ds = bochscpu.Segment()
        ds.present, ds.selector, ds.base, ds.limit, ds.attr = True, DATA_SEL, 0, 0xFFFFFFFF, 0xC093
        st.cs = cs
        st.ds = st.ss = st.es = st.fs = st.gs = ds
        self.sess.cpu.state = st

        hook = bochscpu.Hook()
        hook.exception = self.exception
        self.sess.run([hook])
        if self.fault:
            return self.fault
        return self.exit_code

    def exception(self, sess, cpu_id, vector, error):
        cpu = sess.cpu
        if vector == 6 and SYSCALL_GPA <= cpu.rip <= SYSCALL_GPA + 2:  # ud2 (rip before or after it)
            try:
                if time.monotonic() > self.deadline:
                    raise Exit(124)
                result = self.syscall(cpu)
            except Exit as e:
                self.exit_code = e.code
                sess.stop()
                return
            except Exception as e:  # a bug here must not hang the emulated program
                self.fault = f"emu_run: system call {cpu.rax} failed in the emulator: {e!r}"
                sess.stop()
                return
            cpu.rax = result & 0xFFFFFFFFFFFFFFFF
            cpu.rip = cpu.rcx  # back after the syscall instruction (rcx), r11 = rflags as Linux
            return
        names = {0: "divide error", 6: "invalid opcode (an instruction this CPU model lacks?)",
                 13: "general protection", 14: "page fault", 17: "alignment check", 19: "SIMD floating point"}
        self.fault = (f"emu_run: exception {vector} ({names.get(vector, '?')}), error code {error:#x}, "
                      f"at rip {cpu.rip:#x} (addr2line -e <program> {cpu.rip:#x})")
        sess.stop()

    # ---- threads: run one at a time, a new one to its end before its creator goes on ----
    # Enough for "start a thread, join it" (std::thread in tests). A thread that waits for
    # its creator would wait forever: emu_check.sh's timeout ends such a run.
    def clone(self, cpu, flags, stack, ptid, ctid, tls):
        CLONE_VM, CLONE_SETTLS, CLONE_PARENT_SETTID, CLONE_CHILD_CLEARTID = 0x100, 0x80000, 0x100000, 0x200000
        if not flags & CLONE_VM:
            return -errno.ENOSYS                  # fork: not here
        tid = self.next_tid
        self.next_tid += 1
        if flags & CLONE_PARENT_SETTID:
            self.write(ptid, struct.pack("<i", tid))
        parent = cpu.state                        # resumed by thread_exit: rax = tid, rip = rcx
        self.parents.append((parent, tid, ctid if flags & CLONE_CHILD_CLEARTID else 0))
        if flags & CLONE_SETTLS:
            fs = cpu.fs
            fs.base = tls
            cpu.fs = fs
        cpu.rsp = stack
        return 0                                  # the child returns 0 from clone, on its stack

    def thread_exit(self, cpu):
        parent, tid, clear = self.parents.pop()
        if clear:
            self.write(clear, struct.pack("<i", 0))  # what pthread_join waits for
        cpu.state = parent                        # the creator, in its clone system call
        return tid

    # ---- Linux system calls (x86-64 numbers) ----
    def syscall(self, cpu):
        nr = cpu.rax
        a = [cpu.rdi, cpu.rsi, cpu.rdx, cpu.r10, cpu.r8, cpu.r9]
        def sint(x):
            return x - (1 << 64) if x >> 63 else x
        if nr == 60 and self.parents:             # a thread's exit: back to its creator
            return self.thread_exit(cpu)
        if nr in (60, 231):                       # exit, exit_group
            raise Exit(sint(a[0]) & 0xFF)
        if nr in (1, 20):                         # write, writev (the same bytes, gathered)
            fd = self.fds.get(a[0])
            if fd is None:
                return -errno.EBADF
            if nr == 1:
                data = self.read(a[1], a[2])
            else:
                iov = [struct.unpack("<QQ", self.read(a[1] + 16 * i, 16)) for i in range(a[2])]
                data = b"".join(self.read(base, ln) for base, ln in iov)
            if fd in (1, 2):
                stream = sys.stdout.buffer if fd == 1 else sys.stderr.buffer
                stream.write(data)
                stream.flush()
                return len(data)
            return os.write(fd, data)
        if nr == 0:                               # read
            fd = self.fds.get(a[0])
            if fd is None:
                return -errno.EBADF
            data = os.read(fd, a[2]) if fd != 0 else b""
            self.write(a[1], data)
            return len(data)
        if nr in (2, 257):                        # open, openat
            path = self.cstring(a[1] if nr == 257 else a[0])
            flags = a[2] if nr == 257 else a[1]
            mode = a[3] if nr == 257 else a[2]
            if path.startswith("/proc") or path.startswith("/sys"):
                return -errno.ENOENT  # the host's CPUs and caches are not the emulated ones
            try:
                fd = os.open(path, flags & ~0o2000000, mode)  # not O_CLOEXEC's meaning here
            except OSError as e:
                return -e.errno
            g = max(self.fds) + 1
            self.fds[g] = fd
            return g
        if nr == 3:                               # close
            fd = self.fds.pop(a[0], None)
            if fd is None:
                return -errno.EBADF
            if fd > 2:
                os.close(fd)
            return 0
        if nr == 8:                               # lseek
            fd = self.fds.get(a[0])
            try:
                return os.lseek(fd, sint(a[1]), a[2])
            except (OSError, TypeError):
                return -errno.ESPIPE
        if nr in (5, 262, 4, 6):                  # fstat, newfstatat, stat, lstat
            try:
                if nr == 5 or (nr == 262 and a[2] and self.cstring(a[1]) == "" and a[3] & 0x1000):
                    fd = self.fds.get(a[0])
                    if fd is None:
                        return -errno.EBADF
                    s = os.fstat(fd)
                    buf = a[1] if nr == 5 else a[2]
                else:
                    path = self.cstring(a[1] if nr == 262 else a[0])
                    s = os.stat(path) if nr != 6 else os.lstat(path)
                    buf = a[2] if nr == 262 else a[1]
            except OSError as e:
                return -e.errno
            st = struct.pack("<QQQIIIIQQQQqqqqqqqqq", s.st_dev, s.st_ino, s.st_nlink, s.st_mode, s.st_uid,
                             s.st_gid, 0, s.st_rdev, s.st_size, 4096, (s.st_size + 511) // 512,
                             int(s.st_atime), 0, int(s.st_mtime), 0, int(s.st_ctime), 0, 0, 0, 0)
            self.write(buf, st[:144])
            return 0
        if nr == 12:                              # brk
            if a[0] >= self.brk_start:
                self.brk = a[0]
            return self.brk
        if nr == 9:                               # mmap
            addr, length, prot, flags, fd, off = a
            length = (length + PAGE - 1) & ~(PAGE - 1)
            if flags & 0x10:                      # MAP_FIXED
                self.unmap(addr, length)
            else:
                addr = self.mmap_next
                self.mmap_next += length + PAGE   # a guard page between mappings
            if not flags & 0x20:                  # a file mapping: copy its bytes
                f = self.fds.get(sint(fd) if sint(fd) >= 0 else -1)
                if f is None:
                    return -errno.EBADF
                self.write(addr, os.pread(f, length, off))
            return addr
        if nr == 11:                              # munmap
            self.unmap(a[0], a[1])
            return 0
        if nr == 25:                              # mremap: a new place, the old bytes copied
            old, old_len, new_len = a[0], a[1], (a[2] + PAGE - 1) & ~(PAGE - 1)
            if not a[3] & 1:                      # MREMAP_MAYMOVE not given
                return -errno.ENOMEM
            addr = self.mmap_next
            self.mmap_next += new_len + PAGE
            for p in range(0, min(old_len, new_len), PAGE):
                if (old + p) >> 12 in self.pages:
                    self.write(addr + p, self.read(old + p, min(PAGE, old_len - p)))
            self.unmap(old, old_len)
            return addr
        if nr in (10, 28):                        # mprotect, madvise
            return 0
        if nr == 158:                             # arch_prctl
            if a[0] == 0x1002:                    # ARCH_SET_FS
                fs = cpu.fs
                fs.base = a[1]
                cpu.fs = fs
                return 0
            if a[0] == 0x1003:                    # ARCH_GET_FS
                self.write(a[1], struct.pack("<Q", cpu.fs.base))
                return 0
            return -errno.EINVAL
        if nr in (218, 39, 186, 110):             # set_tid_address, getpid, gettid, getppid
            return 1000
        if nr in (102, 104, 107, 108):            # getuid, getgid, geteuid, getegid
            return os.getuid() if nr in (102, 107) else os.getgid()
        if nr in (13, 14, 131, 273, 24, 95):      # rt_sigaction/procmask, sigaltstack, set_robust_list, sched_yield, umask
            if nr == 13 and a[2]:
                self.write(a[2], bytes(32))
            return 0
        if nr == 334:                             # rseq
            return -errno.ENOSYS
        if nr == 16:                              # ioctl: no terminals here
            return -errno.ENOTTY
        if nr == 318:                             # getrandom
            self.write(a[0], os.urandom(a[1]))
            return a[1]
        if nr in (228, 96, 201):                  # clock_gettime, gettimeofday, time
            t = time.clock_gettime_ns(a[0]) if nr == 228 else time.time_ns()
            if nr == 201:
                if a[0]:
                    self.write(a[0], struct.pack("<q", t // 10**9))
                return t // 10**9
            sub = t % 10**9 if nr == 228 else (t % 10**9) // 1000
            if a[1 if nr == 228 else 0]:
                self.write(a[1 if nr == 228 else 0], struct.pack("<qq", t // 10**9, sub))
            return 0
        if nr == 229:                             # clock_getres
            if a[1]:
                self.write(a[1], struct.pack("<qq", 0, 1))
            return 0
        if nr == 204:                             # sched_getaffinity: one CPU
            self.write(a[2], b"\x01" + bytes(min(a[1], 128) - 1))
            return min(a[1], 128)
        if nr in (302, 97):                       # prlimit64, getrlimit
            out = a[3] if nr == 302 else a[1]
            res = a[1] if nr == 302 else a[0]
            if out:
                lim = 8 << 20 if res == 3 else (1 << 64) - 1   # RLIMIT_STACK 8 MiB
                self.write(out, struct.pack("<QQ", lim, (1 << 64) - 1))
            return 0
        if nr == 63:                              # uname
            fields = [b"Linux", b"emu", b"6.1.0", b"#1", b"x86_64", b"(none)"]
            self.write(a[0], b"".join(f.ljust(65, b"\0") for f in fields))
            return 0
        if nr == 202:                             # futex: one thread, nobody to wait for
            return 0 if (a[1] & 0x7F) in (1, 10) else -errno.EAGAIN
        if nr == 89:                              # readlink
            return -errno.ENOENT
        if nr in (87, 263):                       # unlink, unlinkat
            try:
                os.unlink(self.cstring(a[0] if nr == 87 else a[1]))
                return 0
            except OSError as e:
                return -e.errno
        if nr in (82, 264, 316):                  # rename, renameat, renameat2
            try:
                src = self.cstring(a[0] if nr == 82 else a[1])
                dst = self.cstring(a[1] if nr == 82 else a[3])
                os.replace(src, dst)
                return 0
            except OSError as e:
                return -e.errno
        if nr in (74, 75):                        # fsync, fdatasync
            return 0
        if nr in (83, 258):                       # mkdir, mkdirat
            try:
                os.mkdir(self.cstring(a[0] if nr == 83 else a[1]), (a[1] if nr == 83 else a[2]) & 0o777)
                return 0
            except OSError as e:
                return -e.errno
        if nr == 79:                              # getcwd
            cwd = os.getcwd().encode() + b"\0"
            if len(cwd) > a[1]:
                return -errno.ERANGE
            self.write(a[0], cwd)
            return len(cwd)
        if nr == 435:                             # clone3: glibc falls back to clone
            return -errno.ENOSYS
        if nr == 56:                              # clone: a thread runs to its end first
            return self.clone(cpu, *a[:5])
        sys.stderr.write(f"emu_run: system call {nr} is not emulated (returns ENOSYS)\n")
        return -errno.ENOSYS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", action="append", default=[], help="K=V for the program's environment")
    ap.add_argument("--max-seconds", type=float, default=3600)
    ap.add_argument("program")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    opt = ap.parse_args()
    env = {"OMP_NUM_THREADS": "1", "OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    for kv in opt.env:
        k, _, v = kv.partition("=")
        env[k] = v
    m = Machine(env, opt.max_seconds)
    entry, sp = m.load(opt.program, [opt.program] + opt.args)
    t0 = time.monotonic()
    result = m.start(entry, sp)
    sys.stdout.flush()
    if isinstance(result, str):
        print(result, file=sys.stderr)
        os._exit(125)
    if result == 124:
        print(f"emu_run: {opt.program} ran past {opt.max_seconds:.0f} s", file=sys.stderr)
    print(f"emu_run: {os.path.basename(opt.program)} exited {result} after {time.monotonic() - t0:.1f} s emulated",
          file=sys.stderr)
    sys.stderr.flush()
    os._exit(result if result is not None else 125)  # skip the binding's teardown (it is noisy)


if __name__ == "__main__":
    main()
