# test_gpu_devapi_torchcomms: torchcomms' own device-API test kernels
# (comms/torchcomms/tests/integration/cpp/DeviceApiTestKernels.cu, compiled unmodified from a
# torchcomms tree) on cclx's device-window backend, driven by cclx's harness
# (torchcomms_devapi.cc: ranks sharing GPUs, eager launches and CUDA-graph replays). The
# adapter/ folder stands in for torchcomms' NCCLX device headers; nothing of torchcomms is kept in
# this tree. Built when CCLX_TORCHCOMMS_SRC (cmake/torchcomms.cmake; scripts/devapi.sh extract
# copies the few files needed into .dev/torchcomms) holds the device headers and the kernels;
# otherwise ctest lists the test as skipped and says why.
if(NOT CCLX_HAVE_CUDA)
  return()
endif()

set(CCLX_DEVAPI_KERNELS
  "${CCLX_TORCHCOMMS_SRC}/comms/torchcomms/tests/integration/cpp/DeviceApiTestKernels.cu")
set(CCLX_DEVAPI_WHY "")
if(NOT CCLX_TORCHCOMMS_SRC)
  set(CCLX_DEVAPI_WHY "CCLX_TORCHCOMMS_SRC is not set (scripts/devapi.sh extract copies torchcomms' files into .dev/torchcomms; scripts/gpu_verify.sh build sets it)")
elseif(NOT EXISTS "${CCLX_TORCHCOMMS_SRC}/comms/torchcomms/device/TorchCommDeviceWindow.hpp" OR
       NOT EXISTS "${CCLX_DEVAPI_KERNELS}")
  set(CCLX_DEVAPI_WHY "${CCLX_TORCHCOMMS_SRC} lacks comms/torchcomms/device/TorchCommDeviceWindow.hpp or tests/integration/cpp/DeviceApiTestKernels.cu")
endif()

if(CCLX_DEVAPI_WHY)
  message(STATUS "cclx: test_gpu_devapi_torchcomms not built: ${CCLX_DEVAPI_WHY}")
  add_test(NAME cpp.test_gpu_devapi_torchcomms
    COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: test_gpu_devapi_torchcomms not built: ${CCLX_DEVAPI_WHY}")
  set_tests_properties(cpp.test_gpu_devapi_torchcomms PROPERTIES LABELS cpp
    SKIP_REGULAR_EXPRESSION "SKIPPED:")
  return()
endif()

message(STATUS "cclx: test_gpu_devapi_torchcomms from ${CCLX_TORCHCOMMS_SRC}")
set(devapi_dir ${CMAKE_CURRENT_SOURCE_DIR}/cpp/gpu/devapi)
add_executable(test_gpu_devapi_torchcomms ${devapi_dir}/torchcomms_devapi.cc
  ${devapi_dir}/devapi_reset.cu ${CCLX_DEVAPI_KERNELS})
# The adapter first, so that its NCCLX header names win over any in the torchcomms tree.
target_include_directories(test_gpu_devapi_torchcomms BEFORE PRIVATE ${devapi_dir}/adapter)
target_include_directories(test_gpu_devapi_torchcomms PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cpp)
target_include_directories(test_gpu_devapi_torchcomms SYSTEM PRIVATE "${CCLX_TORCHCOMMS_SRC}")
# torchcomms' traits header (NCCLX's and Pipes' backends) beside cclx's, where NCCL's device
# headers are installed.
find_path(CCLX_NCCL_DEVICE_INCLUDE nccl_device/impl/comm__types.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/include /usr/local/include)
if(CCLX_NCCL_DEVICE_INCLUDE AND
   EXISTS "${CCLX_TORCHCOMMS_SRC}/comms/torchcomms/device/DeviceBackendTraits.hpp")
  target_compile_definitions(test_gpu_devapi_torchcomms PRIVATE CCLX_DEVAPI_WITH_NCCL_TRAITS=1)
  target_include_directories(test_gpu_devapi_torchcomms SYSTEM PRIVATE ${CCLX_NCCL_DEVICE_INCLUDE})
endif()
target_compile_options(test_gpu_devapi_torchcomms PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
target_link_libraries(test_gpu_devapi_torchcomms PRIVATE cclx::device cclx_test_helpers
  GTest::gtest GTest::gtest_main Threads::Threads CUDA::cudart)
add_test(NAME cpp.test_gpu_devapi_torchcomms COMMAND test_gpu_devapi_torchcomms)
set_tests_properties(cpp.test_gpu_devapi_torchcomms PROPERTIES TIMEOUT 1800 LABELS cpp
  ENVIRONMENT "CCLX_ABORT_ON_ERROR=0" SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
