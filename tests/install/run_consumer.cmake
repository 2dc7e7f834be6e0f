# Installs the kiln build tree into a scratch prefix, then configures, builds and runs
# tests/install/consumer against it. Run by CTest as `install_consumer`.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${KILN_BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed (${rc})")
endif()
# The public include form is <kiln/...>: nothing but include/kiln/ may be installed.
file(GLOB entries RELATIVE ${WORK}/prefix/include ${WORK}/prefix/include/*)
if(NOT entries STREQUAL "kiln")
  message(FATAL_ERROR "include/ holds '${entries}', expected only kiln/")
endif()
# No machine's absolute path in the exported CMake files (a library is named by target).
file(GLOB exported ${WORK}/prefix/lib*/cmake/kiln/*.cmake)
foreach(f ${exported})
  file(STRINGS ${f} lines REGEX "[\";:]/[a-z]")
  if(lines)
    message(FATAL_ERROR "${f} names an absolute path: ${lines}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${KILN_SOURCE}/tests/install/consumer -B ${WORK}/build
                -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_BUILD_TYPE=Release RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer configure failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer build failed (${rc})")
endif()
execute_process(COMMAND ${WORK}/build/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer run failed (${rc})")
endif()
