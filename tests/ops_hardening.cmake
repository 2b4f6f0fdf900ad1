# tests/ops_hardening.cmake — regression tests of the hardened core (included from
# tests/CMakeLists.txt): non-finite inputs, empty tensors, size limits, concurrent use, the ABI.
foreach(t nonfinite empty core_limits abi)
  add_executable(test_${t} test_${t}.c)
  target_link_libraries(test_${t} PRIVATE mamba2c_test_harness)
  add_test(NAME ${t} COMMAND test_${t} -q)
  set_tests_properties(${t} PROPERTIES TIMEOUT 300)
endforeach()
find_package(Threads REQUIRED)
add_executable(test_busy test_busy.c)
target_link_libraries(test_busy PRIVATE mamba2c_test_harness Threads::Threads)
add_test(NAME busy COMMAND test_busy -q)
set_tests_properties(busy PROPERTIES TIMEOUT 120)
