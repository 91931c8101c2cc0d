# Warnings as a target property, never as global flags.
add_library(flowtune_warnings INTERFACE)
target_compile_options(flowtune_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor
  $<$<BOOL:${FT_WERROR}>:-Werror>)
option(FT_WERROR "Treat warnings as errors" OFF)
