# FT_SANITIZE=address → ASan + UBSan (no recovery); FT_SANITIZE=thread → TSan.
# Applied to every target of this project through an interface library.
add_library(flowtune_sanitizers INTERFACE)
if(FT_SANITIZE STREQUAL "address")
  set(_ft_san -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
elseif(FT_SANITIZE STREQUAL "thread")
  set(_ft_san -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT FT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "FT_SANITIZE must be '', 'address' or 'thread' (got '${FT_SANITIZE}')")
endif()
if(_ft_san)
  target_compile_options(flowtune_sanitizers INTERFACE ${_ft_san})
  target_link_options(flowtune_sanitizers INTERFACE ${_ft_san})
endif()

# Fuzz builds instrument every target for coverage, so libFuzzer sees the
# engine's branches, not only the fuzz target's.
if(FT_FUZZ)
  target_compile_options(flowtune_sanitizers INTERFACE -fsanitize=fuzzer-no-link)
endif()

# The engine's numeric loops keep their edge coverage but not comparison
# tracing (FT_FUZZ_NUMERIC_OPTIONS, applied by allocator/core and
# allocator/parallel): tracing helps libFuzzer match input bytes against
# constants a parser compares them with, while the engine compares
# computed prices, rates and indices, and tracing every one (its worker
# team's waits included) cost engine_diff_fuzz inputs per second for no
# coverage (the runs: docs/results/reliability-fuzzing.md).
set(FT_FUZZ_NUMERIC_OPTIONS "")
if(FT_FUZZ)
  set(FT_FUZZ_NUMERIC_OPTIONS -fno-sanitize-coverage=trace-cmp)
endif()

# Every project target links this: warnings + sanitizers.
add_library(flowtune_defaults INTERFACE)
target_link_libraries(flowtune_defaults INTERFACE flowtune_warnings flowtune_sanitizers)
