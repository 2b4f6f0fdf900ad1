# tests/ops_ssd_chunked.cmake — the staged SSD chunk pipeline tests and the fused op's chunking
# parities (included from tests/CMakeLists.txt).
add_executable(test_ssd_chunked test_ssd_chunked.c)
target_link_libraries(test_ssd_chunked PRIVATE mamba2c_test_harness)
add_test(NAME ssd_chunked COMMAND test_ssd_chunked)
set_tests_properties(ssd_chunked PROPERTIES TIMEOUT 600)
