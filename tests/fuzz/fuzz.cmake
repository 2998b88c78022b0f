# Fuzzing (tests/fuzz/): included from tests/tests.cmake. The fuzz targets are built by
# run_fuzz.sh as a separate clang project (libFuzzer + ASan + UBSan) in build-fuzz/, whatever
# compiler this build uses; the test replays the regression inputs and seeds, then fuzzes each
# target for 30 s. Without clang's libFuzzer it prints "skipped: no clang libFuzzer" (skipped).
# Only in the regular build: the fuzz build has its own sanitizers, and the ASan build's ctest run
# would only repeat it.
if(NOT VAE_SANITIZE AND EXISTS ${CMAKE_SOURCE_DIR}/tests/fuzz/run_fuzz.sh)
  add_test(NAME fuzz_short COMMAND bash ${CMAKE_SOURCE_DIR}/tests/fuzz/run_fuzz.sh)
  set_tests_properties(fuzz_short PROPERTIES LABELS fuzz TIMEOUT 900
                       ENVIRONMENT "FUZZ_SECONDS=30;FUZZ_BUILD=${CMAKE_BINARY_DIR}/fuzz"
                       SKIP_REGULAR_EXPRESSION "skipped: no clang libFuzzer")
endif()
