# Finds the Debian-packaged dependencies; when one is missing and FT_AUTO_DEPS is
# on, runs scripts/install-deps.sh once and looks again.
function(ft_find_all out_ok)
  set(ok TRUE)
  find_package(TBB CONFIG QUIET)
  # CapnProto's config may be loaded only once per directory: probe its files.
  find_path(FT_CAPNP_INCLUDE capnp/message.h)
  find_program(FT_CAPNPC_CXX capnpc-c++)
  find_package(nlohmann_json 3 CONFIG QUIET)
  find_package(cppzmq CONFIG QUIET)
  find_package(tomlplusplus CONFIG QUIET)
  find_package(Threads QUIET)
  find_package(prometheus-cpp CONFIG QUIET)
  find_package(MPI QUIET COMPONENTS C)
  # libzmq (the library itself, for libflowtune's link interface) comes
  # through pkg-config: imported target PkgConfig::zmq.
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(FT_PROBE_ZMQ QUIET libzmq)
    pkg_check_modules(FT_PROBE_URING QUIET liburing)
  endif()
  if(FT_BUILD_TESTS)
    find_package(GTest CONFIG QUIET)
    if(NOT GTest_FOUND)
      set(ok FALSE)
    endif()
  endif()
  if(FT_BUILD_BENCH)
    find_package(benchmark CONFIG QUIET)
    if(NOT benchmark_FOUND)
      set(ok FALSE)
    endif()
  endif()
  if(NOT TBB_FOUND OR NOT FT_CAPNP_INCLUDE OR NOT FT_CAPNPC_CXX OR NOT nlohmann_json_FOUND OR NOT Threads_FOUND
     OR NOT cppzmq_FOUND OR NOT tomlplusplus_FOUND OR NOT MPI_C_FOUND OR NOT FT_PROBE_ZMQ_FOUND
     OR NOT FT_PROBE_URING_FOUND OR NOT prometheus-cpp_FOUND)
    set(ok FALSE)
  endif()
  set(${out_ok} ${ok} PARENT_SCOPE)
endfunction()

ft_find_all(_ft_deps_ok)
if(NOT _ft_deps_ok AND FT_AUTO_DEPS)
  message(STATUS "Flowtune: dependencies missing, running scripts/install-deps.sh")
  execute_process(COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/scripts/install-deps.sh
                  RESULT_VARIABLE _ft_rc)
  if(NOT _ft_rc EQUAL 0)
    message(FATAL_ERROR "scripts/install-deps.sh failed (${_ft_rc}); install the packages it lists")
  endif()
endif()

find_package(Threads REQUIRED)
find_package(TBB CONFIG REQUIRED)
find_package(CapnProto CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(cppzmq CONFIG REQUIRED)
find_package(tomlplusplus CONFIG REQUIRED)
# prometheus-cpp: the daemons' /metrics (its pull exposer, civetweb inside).
find_package(prometheus-cpp CONFIG REQUIRED)
# Open MPI: the engine across processes (allocator/mpi).
find_package(MPI REQUIRED COMPONENTS C)
find_package(PkgConfig REQUIRED)
pkg_check_modules(zmq REQUIRED IMPORTED_TARGET libzmq)
# liburing: flowtune-shuffle's data path (examples/shuffle), and the
# io_uring way of bench/wake_floor.
if(FT_BUILD_EXAMPLES OR FT_BUILD_BENCH)
  pkg_check_modules(uring REQUIRED IMPORTED_TARGET liburing)
endif()
if(FT_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(FT_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
