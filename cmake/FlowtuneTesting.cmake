include(GoogleTest)
# ft_add_test(NAME SOURCES... LIBS...): one GoogleTest binary, tests discovered
# by ctest, labelled by the component folder it mirrors.
function(ft_add_test name)
  cmake_parse_arguments(FT "" "LABEL" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${FT_SOURCES})
  target_link_libraries(${name} PRIVATE ${FT_LIBS} GTest::gtest GTest::gtest_main flowtune_defaults)
  set(env "")
  if(FT_SANITIZE STREQUAL "thread")
    set(env ENVIRONMENT "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp halt_on_error=1")
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${FT_LABEL}" ${env} DISCOVERY_TIMEOUT 60)
endfunction()
