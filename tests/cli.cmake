# The gpufrac command's answers to mistyped command lines.
gpufrac_test(cli_usage_test integration SOURCES integration/cli_usage_test.cc
             LIBS gpufrac_test_harness)
add_dependencies(cli_usage_test gpufrac_main)
