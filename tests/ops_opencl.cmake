# tests/ops_opencl.cmake — the GPU kernels on the OpenCL backend (PoCL in CI; included from
# tests/CMakeLists.txt). Exit code 77 = no OpenCL device at all (SKIPPED); `make test`
# installs PoCL first so that CI never skips it.
# the SSD ops (fused, staged stages, states at positions) and the device selection: test_ops
# (tests/ops/, ops_test_ops.cmake); on the CUDA backend (host mode) where a GPU exists
add_test(NAME opencl_ssd COMMAND test_ops --backend opencl --op ssd,stages,positions,context -q)
set_tests_properties(opencl_ssd PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "gpu;opencl")
add_test(NAME cuda_ssd COMMAND test_ops --backend cuda --op ssd,stages,positions -q)
set_tests_properties(cuda_ssd PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "gpu;cuda")
# bf16/f16 storage of the fused SSD op on the OpenCL backend: the half test's own table
add_test(NAME ssd_half_opencl COMMAND test_ssd_half --backend opencl -q)
set_tests_properties(ssd_half_opencl PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "gpu;opencl")
# device mode: tensors in the caller's cl_mem buffers (the test dlopens the ICD loader itself)
add_executable(test_opencl_device gpu/test_opencl_device.c)
target_include_directories(test_opencl_device PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(test_opencl_device PRIVATE mamba2c_test_harness ${CMAKE_DL_LIBS})
add_test(NAME opencl_device COMMAND test_opencl_device -q)
set_tests_properties(opencl_device PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "gpu;opencl")
# the CUDA build (where nvcc was found): every kernel of list.h and tc_list.h made it into the
# fat binary
if(MAMBA2C_CUDA)
  add_test(NAME cuda_fatbin_kernels COMMAND ${CMAKE_COMMAND}
           -DLIST=${PROJECT_SOURCE_DIR}/src/gpu/kernels/list.h
           -DTC_LIST=${PROJECT_SOURCE_DIR}/src/cuda/tc_list.h -DFATBIN=${MAMBA2C_FATBIN}
           -P ${PROJECT_SOURCE_DIR}/cmake/check_fatbin.cmake)
  set_tests_properties(cuda_fatbin_kernels PROPERTIES LABELS "gpu;cuda" TIMEOUT 120)
endif()
# the tensor-core kernels' tile arithmetic and shared-memory layout, emulated on the host
# (plain C over src/cuda/tc_tiles.h: no GPU and no nvcc needed)
add_executable(test_tc_tiles gpu/test_tc_tiles.c)
target_include_directories(test_tc_tiles PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(test_tc_tiles PRIVATE m)
add_test(NAME cuda_tc_tiles COMMAND test_tc_tiles)
set_tests_properties(cuda_tc_tiles PROPERTIES LABELS "gpu;cuda" TIMEOUT 120)
# CUDA device mode (mamba2_context_create_cuda): BACKEND_UNAVAILABLE checked where no GPU
# exists; on a GPU, cuMemAlloc'd tensors on the test's stream, bitwise equal to host mode
add_executable(test_cuda_device gpu/test_cuda_device.c)
target_include_directories(test_cuda_device PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_cuda_device PRIVATE mamba2c_test_harness ${CMAKE_DL_LIBS})
add_test(NAME cuda_device COMMAND test_cuda_device -q)
set_tests_properties(cuda_device PROPERTIES TIMEOUT 300 LABELS "gpu;cuda")
# CUDA device mode for graph capture: device index tensors and a caller's allocator, no
# allocation / host copy / sync inside an op (counted on the emulated device: cuda_emu_capture)
add_executable(test_cuda_capture gpu/test_cuda_capture.c)
target_include_directories(test_cuda_capture PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_cuda_capture PRIVATE mamba2c_test_harness ${CMAKE_DL_LIBS})
add_test(NAME cuda_capture COMMAND test_cuda_capture -q)
set_tests_properties(cuda_capture PROPERTIES TIMEOUT 300 LABELS "gpu;cuda")
# the GPU host layer's launch check: every kernel's argument kinds from its prototype
# (cmake/kernel_sigs.cmake), and planted swaps / missing / extra arguments refused
add_executable(test_kernel_sigs gpu/test_kernel_sigs.c)
target_include_directories(test_kernel_sigs PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_kernel_sigs PRIVATE mamba2c_test_harness mamba2c_static)
add_test(NAME gpu_kernel_sigs COMMAND test_kernel_sigs -q ${MAMBA2C_GPU_PROTO_FILES})
set_tests_properties(gpu_kernel_sigs PROPERTIES LABELS "gpu" TIMEOUT 60)
# the typed kernel launchers (cmake/kernel_launchers.cmake) on a recording device: named
# fields in prototype order, work-group shape from the name, twins checked at the launch
add_executable(test_kernel_launchers gpu/test_kernel_launchers.c)
target_include_directories(test_kernel_launchers PRIVATE ${PROJECT_SOURCE_DIR}/src
                           ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_kernel_launchers PRIVATE mamba2c_test_harness mamba2c_static)
add_dependencies(test_kernel_launchers mamba2c_gpu_launchers)
add_test(NAME gpu_kernel_launchers COMMAND test_kernel_launchers -q)
set_tests_properties(gpu_kernel_launchers PROPERTIES LABELS "gpu" TIMEOUT 60)
