# cmake -DBINARY=build/mist -P tests/no_libtorch.cmake: fails when the binary needs a LibTorch
# library (libtorch*, libc10*): only mist-measure may load it (src/cli/measure_commands.hpp).
execute_process(COMMAND ldd ${BINARY} OUTPUT_VARIABLE libs ERROR_VARIABLE error RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "ldd ${BINARY} failed (${status}): ${error}")
endif()
# The library names only: a path such as a build folder may contain "torch" itself.
string(REGEX MATCHALL "(^|\n)[ \t]*lib(torch|c10)[^ \t\n]*" found "${libs}")
if(found)
  string(REPLACE "\n" "" found "${found}")
  message(FATAL_ERROR "${BINARY} loads LibTorch: ${found}")
endif()
string(REGEX MATCHALL "\n" lines "${libs}")
list(LENGTH lines count)
message(STATUS "${BINARY}: ${count} shared libraries, none of LibTorch")
