/*
 * tc_list.h — the CUDA-only tensor-core kernels (src/cuda/ssd_tc.cuh, ssd_tc_bwd.cuh), one
 * M2G_TC_KERNEL(name) line each (an X-macro list, like gpu/kernels/list.h for the portable
 * ones). Their kernel ids M2G_K_<name> follow the portable ones (src/gpu/gpu.h), their
 * signatures are in the same table (cmake/kernel_sigs.cmake), src/cuda/cuda.c looks them up
 * after the portable kernels;
 * ctest cuda_fatbin_kernels checks that each one is in the fat binary. _tc128: one block of
 * 128 threads (4 warps) on the tensor cores.
 */
M2G_TC_KERNEL(m2_ssd_chunk_state_tf32_tc128)
M2G_TC_KERNEL(m2_ssd_chunk_state_bf16_tc128)
M2G_TC_KERNEL(m2_ssd_chunk_scan_tf32_tc128)
M2G_TC_KERNEL(m2_ssd_chunk_scan_bf16_tc128)
M2G_TC_KERNEL(m2_ssd_scan_seq_tf32_tc128)
M2G_TC_KERNEL(m2_ssd_scan_seq_bf16_tc128)
M2G_TC_KERNEL(m2_ssd_bwd_dbc_tf32_tc128)
M2G_TC_KERNEL(m2_ssd_bwd_dbc_bf16_tc128)
M2G_TC_KERNEL(m2_ssd_bwd_tok_3xtf32_tc128)
M2G_TC_KERNEL(m2_ssd_bwd_dx_tf32_tc128)
M2G_TC_KERNEL(m2_ssd_bwd_dx_bf16_tc128)
M2G_TC_KERNEL(m2_ssd_chunk_state_3xtf32_tc128)
M2G_TC_KERNEL(m2_ssd_bmm_chunk_3xtf32_tc128)
M2G_TC_KERNEL(m2_ssd_bwd_E_3xtf32_tc128)
/* @@ more tensor-core kernels go above this line @@ */
