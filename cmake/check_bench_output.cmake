# Runs a benchmark program for ctest and checks what it printed, not only
# its exit code: the command must exit with 0 and print, for each regular
# expression in BENCH_EXPECT, a line matching it (the benchmarks' tests ask for
# table rows whose figures are positive).
#
#   cmake "-DBENCH_COMMAND=prog;arg;..." "-DBENCH_EXPECT=regex;..." -P check_bench_output.cmake
if(NOT BENCH_COMMAND OR NOT BENCH_EXPECT)
  message(FATAL_ERROR "check_bench_output.cmake: give -DBENCH_COMMAND=... and -DBENCH_EXPECT=...")
endif()
execute_process(COMMAND ${BENCH_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_bench_output: '${BENCH_COMMAND}' exited with ${rc}")
endif()
string(REPLACE "\r" "" out "${out}")
set(missing "")
foreach(re IN LISTS BENCH_EXPECT)
  if(NOT out MATCHES "(^|\n)${re}")
    list(APPEND missing "${re}")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "check_bench_output: no line of the output matches: ${missing}")
endif()
