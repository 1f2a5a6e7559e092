// src/torchcomms/counts.h: the element scale of the torchcomms C++ route (ops.cc), checked
// without torchcomms. A tensor element is a number of cclx elements that follows from the types
// alone, so the ranks of a reduce_scatter_v agree on every count even where one rank's output is
// empty (a rule from count / numel gave that rank 1 for a complex type, its peers 2).
#include <gtest/gtest.h>

#include "torchcomms/counts.h"

using namespace cclx;
using cclx::tc::elementScale;

TEST(TorchcommsCounts, ComplexIsTwoReals) {
  EXPECT_EQ(elementScale(8, DataType::f32), 2u);   // complex64 as pairs of f32
  EXPECT_EQ(elementScale(16, DataType::f64), 2u);  // complex128
  EXPECT_EQ(elementScale(4, DataType::f16), 2u);   // complex32 (ComplexHalf)
}

TEST(TorchcommsCounts, NamedTypesAndBytes) {
  for (DataType t : {DataType::f32, DataType::bf16, DataType::i64, DataType::u8})
    EXPECT_EQ(elementScale(dtypeSize(t), t), 1u);
  EXPECT_EQ(elementScale(1, DataType::u8), 1u);   // bool, reduced as u8
  EXPECT_EQ(elementScale(2, DataType::u8), 2u);   // a 2-byte type cclx has no name for, as bytes
  EXPECT_EQ(elementScale(16, DataType::u8), 16u);
}
