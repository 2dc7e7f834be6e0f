/* bochscpu-python 0.4.0's wheel was built against glibc 2.38, whose <stdlib.h> and <stdio.h>
   call C23's strtoull and sscanf by these names; Debian 12 has glibc 2.36. Preloaded by
   emu_check.sh, these forward to the classic functions (the same for the inputs Bochs parses). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

unsigned long long __isoc23_strtoull(const char* s, char** end, int base) { return strtoull(s, end, base); }

int __isoc23_sscanf(const char* s, const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  int n = vsscanf(s, format, ap);
  va_end(ap);
  return n;
}
