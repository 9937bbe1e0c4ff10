# Writes STRATA_COMMIT_OUTPUT, a header defining STRATA_GIT_COMMIT: the short commit of the
# source tree STRATA_COMMIT_SOURCE, with "-dirty" when tracked files differ from it, or
# "unknown" outside a git checkout (a release tarball). Run at configure time
# and, as `cmake -P`, before every build of the benchmarks, so that the
# configuration line of a benchmark report names the code that was built.
# The file is rewritten only when its content changes: an unchanged commit
# recompiles nothing.
execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY "${STRATA_COMMIT_SOURCE}"
  OUTPUT_VARIABLE _commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0 OR NOT _commit)
  set(_commit "unknown")
else()
  execute_process(COMMAND git --no-optional-locks diff --quiet HEAD -- WORKING_DIRECTORY "${STRATA_COMMIT_SOURCE}"
    RESULT_VARIABLE _dirty OUTPUT_QUIET ERROR_QUIET)
  if(_dirty EQUAL 1)
    string(APPEND _commit "-dirty")
  endif()
endif()
set(_content "#pragma once\n#define STRATA_GIT_COMMIT \"${_commit}\"  // written by cmake/write_commit.cmake\n")
set(_old "")
if(EXISTS "${STRATA_COMMIT_OUTPUT}")
  file(READ "${STRATA_COMMIT_OUTPUT}" _old)
endif()
if(NOT _old STREQUAL _content)
  file(WRITE "${STRATA_COMMIT_OUTPUT}" "${_content}")
endif()
