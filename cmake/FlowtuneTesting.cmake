include(GoogleTest)
# ft_add_test(NAME SOURCES... LIBS...): one GoogleTest binary, tests discovered
# by ctest, labelled by the component folder it mirrors.
function(ft_add_test name)
  cmake_parse_arguments(FT "" "LABEL" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${FT_SOURCES})
  target_link_libraries(${name} PRIVATE ${FT_LIBS} GTest::gtest GTest::gtest_main flowtune_defaults)
  # No test meets a host agent it did not start (one may run on the
  # machine): tests of the agent name their own (tests/agent). A property
  # of its own: a second ENVIRONMENT item would not survive discovery.
  set(env ENVIRONMENT_MODIFICATION "FLOWTUNE_AGENT=set:off")
  if(FT_SANITIZE STREQUAL "thread")
    # die_after_fork=0: the fork tests start clients (threads) in children
    # of multithreaded parents, which the library supports.
    list(APPEND env ENVIRONMENT
      "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp halt_on_error=1 die_after_fork=0")
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${FT_LABEL}" ${env} DISCOVERY_TIMEOUT 60)
endfunction()

# ft_add_fuzzer(NAME LABEL label SOURCES... LIBS... RUNS n MAX_LEN bytes CORPUS dir):
# a libFuzzer target (FT_FUZZ=ON: the 'fuzz' preset) and its short ctest run
# (a fixed seed, RUNS inputs of at most MAX_LEN bytes; new inputs go to a
# scratch corpus in the build tree, the kept corpus CORPUS, relative to this
# folder, is only read). Every fuzzer is listed in build/fuzz/fuzz_targets.tsv
# (name, binary, max_len, kept corpus), which scripts/fuzz-deep.sh reads to
# run each for 10^7 inputs and merge what it finds into the kept corpus.
function(ft_add_fuzzer name)
  cmake_parse_arguments(FT "" "LABEL;RUNS;MAX_LEN;CORPUS" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${FT_SOURCES})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${FT_LIBS} flowtune_defaults)
  set(kept ${CMAKE_CURRENT_SOURCE_DIR}/${FT_CORPUS})
  set(scratch ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
  file(MAKE_DIRECTORY ${scratch})
  add_test(NAME ${name}
           COMMAND ${name} -seed=1 -runs=${FT_RUNS} -max_len=${FT_MAX_LEN} -max_total_time=60
                   ${scratch} ${kept})
  set_tests_properties(${name} PROPERTIES LABELS "${FT_LABEL};fuzz" TIMEOUT 120)
  set_property(GLOBAL APPEND PROPERTY FT_FUZZERS
               "${name}\t$<TARGET_FILE:${name}>\t${FT_MAX_LEN}\t${kept}")
endfunction()

# Writes build/<preset>/fuzz_targets.tsv once every folder has added its
# fuzzers (called at the end of tests/CMakeLists.txt).
function(ft_write_fuzzer_list)
  get_property(fuzzers GLOBAL PROPERTY FT_FUZZERS)
  list(JOIN fuzzers "\n" lines)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/fuzz_targets.tsv CONTENT "${lines}\n")
endfunction()
