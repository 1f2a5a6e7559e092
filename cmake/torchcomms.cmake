# libcclx_torchcomms.so: cclx as a C++ torchcomms backend (src/torchcomms;
# docs/design/torchcomms.md). It needs torchcomms' C++ headers, which its wheel does not ship: point
# CCLX_TORCHCOMMS_SRC (or the environment's TORCHCOMMS_SRC) at a torchcomms source tree of the
# installed torchcomms' commit. It also needs the Python that has torch and that torchcomms
# installed (libtorchcomms.so and the version come from there). CCLX_BUILD_TORCHCOMMS: AUTO (the
# default) builds it when all of that is found and says why not otherwise; ON fails instead; OFF.
set(CCLX_BUILD_TORCHCOMMS "AUTO" CACHE STRING "Build libcclx_torchcomms.so: ON, OFF or AUTO")
set(CCLX_TORCHCOMMS_SRC "$ENV{TORCHCOMMS_SRC}" CACHE PATH "torchcomms source tree (its headers)")

function(cclx_torchcomms_skip why)
  if(CCLX_BUILD_TORCHCOMMS STREQUAL "ON")
    message(FATAL_ERROR "cclx: CCLX_BUILD_TORCHCOMMS=ON, but ${why}")
  endif()
  message(STATUS "cclx: libcclx_torchcomms.so not built: ${why}")
endfunction()

function(cclx_add_torchcomms)
  if(NOT CCLX_BUILD_TORCHCOMMS OR CCLX_BUILD_TORCHCOMMS STREQUAL "OFF")
    return()
  endif()
  if(CCLX_HAVE_HIP)
    cclx_torchcomms_skip("HIP builds have no torchcomms backend")
    return()
  endif()
  if(NOT CCLX_TORCHCOMMS_SRC OR
     NOT EXISTS "${CCLX_TORCHCOMMS_SRC}/comms/torchcomms/TorchCommBackend.hpp")
    cclx_torchcomms_skip("no torchcomms headers (set CCLX_TORCHCOMMS_SRC or TORCHCOMMS_SRC to a "
                         "torchcomms source tree)")
    return()
  endif()
  set(py "${Python3_EXECUTABLE}")
  if(NOT py)
    set(py "${Python_EXECUTABLE}")
  endif()
  if(NOT py)
    find_program(CCLX_TC_PYTHON NAMES python3 python)
    set(py "${CCLX_TC_PYTHON}")
  endif()
  execute_process(COMMAND "${py}" -c [=[
import os, importlib.metadata as md, torch, torchcomms
print(os.path.dirname(torch.__file__))
print(os.path.dirname(torchcomms.__file__))
print(md.version("torchcomms"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
import sysconfig
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX"))
]=] OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    string(REGEX REPLACE "\n$" "" err "${err}")
    string(REGEX REPLACE ".*\n" "" err "${err}")
    cclx_torchcomms_skip("${py} cannot import torch and torchcomms (${err})")
    return()
  endif()
  string(REPLACE "\n" ";" out "${out}")
  list(GET out 0 torch_dir)
  list(GET out 1 tc_dir)
  list(GET out 2 tc_version)
  list(GET out 3 cxx11_abi)
  list(GET out 4 py_include)
  list(GET out 5 py_ext_suffix)
  find_library(CCLX_LIBTORCHCOMMS torchcomms PATHS "${tc_dir}" NO_DEFAULT_PATH)
  if(NOT CCLX_LIBTORCHCOMMS)
    cclx_torchcomms_skip("no libtorchcomms.so in ${tc_dir}")
    return()
  endif()
  set(torch_libs "${torch_dir}/lib/libtorch.so" "${torch_dir}/lib/libtorch_cpu.so"
                 "${torch_dir}/lib/libc10.so")
  if(CCLX_HAVE_CUDA)  # libtorch_cuda: the pluggable allocator (allocator.cc)
    list(APPEND torch_libs "${torch_dir}/lib/libc10_cuda.so" "${torch_dir}/lib/libtorch_cuda.so")
  endif()
  foreach(lib ${torch_libs})
    if(NOT EXISTS "${lib}")
      cclx_torchcomms_skip("${lib} is missing (CUDA builds need a torch with CUDA)")
      return()
    endif()
  endforeach()
  message(STATUS "cclx: building libcclx_torchcomms.so for torchcomms ${tc_version} "
                 "(${CCLX_TORCHCOMMS_SRC}, ${CCLX_LIBTORCHCOMMS})")

  file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/torchcomms/*.cc)
  list(APPEND srcs ${PROJECT_SOURCE_DIR}/src/torchcomms/ext/methods.cc)
  add_library(cclx_torchcomms SHARED ${srcs})
  target_include_directories(cclx_torchcomms PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_include_directories(cclx_torchcomms SYSTEM PRIVATE "${CCLX_TORCHCOMMS_SRC}"
    "${torch_dir}/include" "${torch_dir}/include/torch/csrc/api/include")
  if(CCLX_HAVE_CUDA)
    target_include_directories(cclx_torchcomms SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  target_compile_definitions(cclx_torchcomms PRIVATE
    _GLIBCXX_USE_CXX11_ABI=${cxx11_abi} CCLX_TORCHCOMMS_VERSION="${tc_version}")
  target_compile_options(cclx_torchcomms PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_link_libraries(cclx_torchcomms PRIVATE cclx "${CCLX_LIBTORCHCOMMS}" ${torch_libs})
  # Exported: create_dynamic_loader_cclx, cclx_torchcomms_build_info and the class CclxBackend
  # (for the Python module below).
  set_target_properties(cclx_torchcomms PROPERTIES CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(TARGET _C)  # next to cclx._C, where the Python package looks for it
    set_target_properties(cclx_torchcomms PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/cclx)
  endif()
  # cclx._cclx_torchcomms (src/torchcomms/ext/module.cc): CclxBackend as a pybind11 subclass of
  # torchcomms' TorchCommBackend (get_backend_impl() then has NCCLX's extra methods) and the
  # profiler guard of the Python route. pybind11 is torch's copy, as torchcomms' own modules use.
  add_library(cclx_torchcomms_py MODULE ${PROJECT_SOURCE_DIR}/src/torchcomms/ext/module.cc)
  target_include_directories(cclx_torchcomms_py PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_include_directories(cclx_torchcomms_py SYSTEM PRIVATE "${CCLX_TORCHCOMMS_SRC}"
    "${torch_dir}/include" "${torch_dir}/include/torch/csrc/api/include" "${py_include}")
  if(CCLX_HAVE_CUDA)
    target_include_directories(cclx_torchcomms_py SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  target_compile_definitions(cclx_torchcomms_py PRIVATE _GLIBCXX_USE_CXX11_ABI=${cxx11_abi})
  target_link_libraries(cclx_torchcomms_py PRIVATE cclx_torchcomms cclx "${CCLX_LIBTORCHCOMMS}"
    ${torch_libs} "${torch_dir}/lib/libtorch_python.so")
  set_target_properties(cclx_torchcomms_py PROPERTIES PREFIX "" OUTPUT_NAME "_cclx_torchcomms"
    SUFFIX "${py_ext_suffix}" CXX_VISIBILITY_PRESET hidden)
  if(TARGET _C)
    set_target_properties(cclx_torchcomms_py PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/cclx)
  endif()
  if(SKBUILD)
    # In the wheel: cclx/ next to libcclx, torch/ and torchcomms/ beside cclx/ in site-packages.
    set_target_properties(cclx_torchcomms cclx_torchcomms_py PROPERTIES
      INSTALL_RPATH "$ORIGIN;$ORIGIN/../torch/lib;$ORIGIN/../torchcomms")
    install(TARGETS cclx_torchcomms cclx_torchcomms_py LIBRARY DESTINATION cclx)
  endif()
endfunction()
