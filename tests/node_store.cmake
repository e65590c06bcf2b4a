# Tests of the node service's store (see tests/unit or tests/integration).
# SQLite directly too: the tests damage and inspect the file behind the store's back.
find_package(SQLite3 REQUIRED)
gpufrac_test(node_store_test unit SOURCES unit/node_store_test.cc
             LIBS gpufrac_node_store SQLite::SQLite3)
