# tests/ops_cuda_emu.cmake — the CUDA backend on the emulated device (cmake/cuda_emu.cmake,
# tests/cuda_emu/): the CUDA test programs with the stand-in libcuda.so.1 first on
# LD_LIBRARY_PATH, against the float64 reference as on a GPU: the fused SSD forward, backward,
# states at positions and staged stages (test_ops --op ssd,stages,positions), conv1d, gated
# RMSNorm and the steps (test_ops --op conv1d,rmsnorm,conv1d_step,ssd_step), device mode
# (test_cuda_device), bf16/f16 storage (test_ssd_half), the step cache layouts
# (test_step_layouts), and the emulator's own checks (cuda_emu/test_cuda_emu.c).
# No skip code: a missing device here is a failure. cuda_emu_ssd_tc, cuda_emu_ssd_half_tc and
# cuda_emu_device_tc run the fused forward and backward on the (emulated) tensor cores (tf32
# for f32/f16 storage, bf16 MMA for bf16; device mode bitwise equal to host mode there too). Every run is reduced (MAMBA2C_TEST_REDUCED=1): the emulator runs a CUDA thread as a
# fiber, ~100x slower than PoCL, so test_ops leaves out its layer-sized SSD case and
# test_ssd_half its CPU-split case (L = 6200) on the GPU backends; every op, option, dtype and
# kernel form still runs (timings: docs/gpu.md, "The emulated CUDA device").
if(MAMBA2C_CUDA_EMU_ACTIVE)
  set(emu_env "LD_LIBRARY_PATH=${MAMBA2C_CUDA_EMU_DIR};MAMBA2C_TEST_REDUCED=1")
  set(emu_ssd --backend cuda --op ssd,stages,positions -q)
  add_test(NAME cuda_emu_ssd COMMAND test_ops ${emu_ssd})
  add_test(NAME cuda_emu_ssd_tc COMMAND test_ops ${emu_ssd})
  add_test(NAME cuda_emu_ops COMMAND test_ops --backend cuda
           --op conv1d,rmsnorm,conv1d_step,ssd_step)
  add_test(NAME cuda_emu_device COMMAND test_cuda_device -q)
  add_test(NAME cuda_emu_device_tc COMMAND test_cuda_device -q)
  add_test(NAME cuda_emu_ssd_half COMMAND test_ssd_half --backend cuda -q)
  add_test(NAME cuda_emu_ssd_half_tc COMMAND test_ssd_half --backend cuda -q)
  # the tensor cores' two-kernel forward (chunk states, then the chunk scan) in place of their
  # on-chip scan: with bf16 storage the only run of m2_ssd_chunk_{state,scan}_bf16_tc128
  add_test(NAME cuda_emu_ssd_half_tc_staged COMMAND test_ssd_half --backend cuda -q)
  add_test(NAME cuda_emu_step_layouts COMMAND test_step_layouts --backend cuda -q)
  # the emulator's own rules and its defect detection (planted kernels of cuda_emu/selftest.cuh)
  add_executable(test_cuda_emu cuda_emu/test_cuda_emu.c)
  target_include_directories(test_cuda_emu PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(test_cuda_emu PRIVATE mamba2c_test_harness ${CMAKE_DL_LIBS})
  add_test(NAME cuda_emu_selftest COMMAND test_cuda_emu)
  set(emu_tests cuda_emu_ssd cuda_emu_ssd_tc cuda_emu_ops cuda_emu_device cuda_emu_device_tc
      cuda_emu_ssd_half cuda_emu_ssd_half_tc cuda_emu_ssd_half_tc_staged cuda_emu_step_layouts cuda_emu_selftest)
  set_tests_properties(${emu_tests} PROPERTIES ENVIRONMENT "${emu_env}" TIMEOUT 900
                       LABELS "gpu;cuda;cuda_emu")
  set_property(TEST cuda_emu_ssd_tc cuda_emu_ssd_half_tc cuda_emu_ssd_half_tc_staged cuda_emu_device_tc APPEND PROPERTY
               ENVIRONMENT MAMBA2C_CUDA_TC=1)
  set_property(TEST cuda_emu_ssd_half_tc_staged APPEND PROPERTY ENVIRONMENT MAMBA2C_GPU_SSD_FWD=staged)
  add_dependencies(mamba2c_test_harness m2emu_cuda) # built with every test program
endif()
# the grid fold (issue 26): a z extent past the driver's limit (M2EMU_MAX_GRID_Z=3 there) folded
# into x, bitwise the unfolded run (tests/cuda_emu/test_cuda_grid.c); and the whole SSD suite
# with every chunk, sequence and position count above 3 folded, and the other ops (test_ops)
if(MAMBA2C_CUDA_EMU_ACTIVE)
  add_executable(test_cuda_grid cuda_emu/test_cuda_grid.c)
  target_include_directories(test_cuda_grid PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(test_cuda_grid PRIVATE mamba2c_test_harness)
  add_test(NAME cuda_emu_grid COMMAND test_cuda_grid -q)
  add_test(NAME cuda_emu_ssd_zfold COMMAND test_ops --backend cuda -q)
  set_tests_properties(cuda_emu_grid cuda_emu_ssd_zfold PROPERTIES ENVIRONMENT "${emu_env}"
                       TIMEOUT 900 LABELS "gpu;cuda;cuda_emu")
  set_property(TEST cuda_emu_ssd_zfold APPEND PROPERTY ENVIRONMENT M2EMU_MAX_GRID_Z=3)
endif()
# graph-capturable device mode (issue 26): zero driver allocations, copies and syncs inside the
# ops, counted by the emulated driver; portable and tensor-core kernels
if(MAMBA2C_CUDA_EMU_ACTIVE)
  add_test(NAME cuda_emu_capture COMMAND test_cuda_capture -q)
  add_test(NAME cuda_emu_capture_tc COMMAND test_cuda_capture -q)
  set_tests_properties(cuda_emu_capture cuda_emu_capture_tc PROPERTIES ENVIRONMENT "${emu_env}"
                       TIMEOUT 900 LABELS "gpu;cuda;cuda_emu")
  set_property(TEST cuda_emu_capture_tc APPEND PROPERTY ENVIRONMENT MAMBA2C_CUDA_TC=1)
endif()
