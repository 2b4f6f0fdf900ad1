# tests/ops_test_ops.cmake — test_ops (tests/ops/): one case table per op, run on any backend
# against the float64 reference (`test_ops --backend ref|cpu|opencl|cuda|all --op ...`).
# Here the host backends (label cpu): the reference fed float32 against itself in float64
# (the harness's self-check) and the CPU backend, every op. The GPU backends register the
# same program in ops_opencl.cmake, ops_gpu_ops.cmake and ops_cuda_emu.cmake.
add_executable(test_ops ops/ops_main.c ops/ops_spec.c ops/ops_ssd.c ops/ops_stages.c
               ops/ops_conv_norm.c ops/ops_steps.c ops/ops_cl_device.c)
target_include_directories(test_ops PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}
                           ${PROJECT_SOURCE_DIR}/src) # gpu/cl_loader.h: opencl/cl_api.h
target_link_libraries(test_ops PRIVATE mamba2c_test_harness ${CMAKE_DL_LIBS})
# Reduced (the AArch64 build under qemu): no ops_ref, the reference is the same C everywhere.
add_test(NAME ops_cpu COMMAND test_ops --backend cpu -q)
set_tests_properties(ops_cpu PROPERTIES TIMEOUT 600 LABELS "cpu")
if(NOT MAMBA2C_TEST_REDUCED)
  add_test(NAME ops_ref COMMAND test_ops --backend ref -q)
  set_tests_properties(ops_ref PROPERTIES TIMEOUT 600 LABELS "cpu")
endif()
