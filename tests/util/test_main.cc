// main() of every GoogleTest suite: hermetic (util/hermetic.h), then GoogleTest.
#include <gtest/gtest.h>

#include "hermetic.h"

int main(int argc, char** argv) {
  collx::test::makeHermetic(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
