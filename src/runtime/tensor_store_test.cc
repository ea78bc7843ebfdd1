// The tensor store's bytes: each storage counted once however many
// instances share it, released when the last instance holding it goes
// (replaced, erased or not retained), buffers held beside the instances,
// and the peak since the last reset.
#include "src/runtime/tensor_store.h"

#include "gtest/gtest.h"

namespace quilt {
namespace {

Tensor Floats(int64_t n) { return Tensor::FromF32({n}, std::vector<float>(n, 1.0f)); }

TEST(TensorStore, CountsEachStorageOnceAndReleasesItWithItsLastInstance) {
  TensorStore store;
  const Tensor a = Floats(100);  // 400 bytes
  store.Put(InstanceKey{1, 0, 0}, a);
  store.Put(InstanceKey{2, 0, 0}, a);  // the same storage under another tensor
  EXPECT_EQ(store.live_bytes(), 400);
  store.Put(InstanceKey{3, 0, 4}, Floats(10));
  store.Put(InstanceKey{3, 4, 8}, Floats(20));
  EXPECT_EQ(store.live_bytes(), 400 + 40 + 80);
  // Replacing an instance releases what it held.
  store.Put(InstanceKey{3, 0, 4}, Floats(5));
  EXPECT_EQ(store.live_bytes(), 400 + 20 + 80);
  // Erasing a tensor drops all its instances and hands their values back.
  std::vector<Tensor> dropped = store.Erase(3);
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_EQ(store.live_bytes(), 400);
  EXPECT_TRUE(store.Instances(3).empty());
  EXPECT_TRUE(store.Erase(3).empty());
  // Erasing one instance leaves the others of its tensor, those within its
  // rows included.
  store.Put(InstanceKey{3, 0, 8}, Floats(30));
  store.Put(InstanceKey{3, 0, 4}, Floats(10));
  EXPECT_EQ(store.EraseInstance(InstanceKey{3, 0, 8}).size(), 1u);
  EXPECT_TRUE(store.EraseInstance(InstanceKey{3, 0, 8}).empty());
  EXPECT_EQ(store.live_bytes(), 400 + 40);
  ASSERT_EQ(store.Instances(3).size(), 1u);
  EXPECT_EQ(store.Instances(3)[0].first, (InstanceKey{3, 0, 4}));
  EXPECT_EQ(store.EraseInstance(InstanceKey{3, 0, 4}).size(), 1u);
  EXPECT_TRUE(store.Instances(3).empty());
  // The shared storage stays while one instance holds it.
  store.Erase(1);
  EXPECT_EQ(store.live_bytes(), 400);
  store.Erase(2);
  EXPECT_EQ(store.live_bytes(), 0);
}

TEST(TensorStore, ThePeakIsTheMostHeldSinceTheLastReset) {
  TensorStore store;
  store.Put(InstanceKey{1, 0, 0}, Floats(100));
  store.Put(InstanceKey{2, 0, 0}, Floats(50));
  store.Erase(2);
  store.Put(InstanceKey{3, 0, 0}, Floats(25));
  EXPECT_EQ(store.live_bytes(), 500);
  EXPECT_EQ(store.ResetPeak(), 600);
  // Starting again from what is held.
  EXPECT_EQ(store.ResetPeak(), 500);
  absl::flat_hash_map<InstanceKey, bool> keep;
  keep[InstanceKey{1, 0, 0}] = true;
  EXPECT_EQ(store.Retain(keep).size(), 1u);
  EXPECT_EQ(store.live_bytes(), 400);
  EXPECT_EQ(store.ResetPeak(), 500);
}

TEST(TensorStore, ScratchBuffersCountWhileHeld) {
  TensorStore store;
  store.Put(InstanceKey{1, 0, 0}, Floats(100));
  store.HoldScratch(1000);  // a collective's staging buffer
  EXPECT_EQ(store.live_bytes(), 1400);
  store.Erase(1);
  store.HoldScratch(200);
  EXPECT_EQ(store.live_bytes(), 1200);
  store.ReleaseScratch(1000);
  store.ReleaseScratch(200);
  EXPECT_EQ(store.live_bytes(), 0);
  EXPECT_EQ(store.ResetPeak(), 1400);
  EXPECT_EQ(store.ResetPeak(), 0);
}

TEST(TensorStore, OverwritesAnInstanceOnlyWhereTheStoreAloneHoldsIt) {
  TensorStore store;
  const std::vector<float> sum = {5, 6, 7, 8};
  store.Put(InstanceKey{1, 0, 0}, Floats(4));
  Tensor held;
  ASSERT_TRUE(store.Get(InstanceKey{1, 0, 0}, &held));
  // A reader's copy of it: left as it was.
  EXPECT_FALSE(store.OverwriteIfSole(InstanceKey{1, 0, 0}, {4}, sum.data()));
  EXPECT_EQ(held.f32()[0], 1.0f);
  held = Tensor();
  // Another shape, or no such instance: nothing written.
  EXPECT_FALSE(store.OverwriteIfSole(InstanceKey{1, 0, 0}, {2, 2}, sum.data()));
  EXPECT_FALSE(store.OverwriteIfSole(InstanceKey{2, 0, 0}, {4}, sum.data()));
  ASSERT_TRUE(store.OverwriteIfSole(InstanceKey{1, 0, 0}, {4}, sum.data()));
  ASSERT_TRUE(store.Get(InstanceKey{1, 0, 0}, &held));
  EXPECT_EQ(held.f32()[3], 8.0f);
  EXPECT_EQ(store.live_bytes(), 16);  // no copy made
  // An assembled instance written over counts as whole: a ranged read
  // prefers it to a part that also holds the rows.
  TensorStore parts;
  ASSERT_TRUE(parts.WriteInto(InstanceKey{3, 0, 0}, DType::kF32, {4}, 0, 0, Floats(2)).ok());
  parts.Put(InstanceKey{3, 0, 2}, Floats(2));
  ASSERT_TRUE(parts.OverwriteIfSole(InstanceKey{3, 0, 0}, {4}, sum.data()));
  InstanceKey found;
  Tensor value;
  ASSERT_TRUE(parts.FindContaining(3, 0, 1, &found, &value));
  EXPECT_EQ(found, (InstanceKey{3, 0, 0}));
}

TEST(TensorStore, AssembledAndSlicedWritesCountTheirStorage) {
  TensorStore store;
  // An instance assembled from two receives: allocated at the first.
  ASSERT_TRUE(store.WriteInto(InstanceKey{1, 0, 0}, DType::kF32, {8}, 0, 0, Floats(4)).ok());
  ASSERT_TRUE(store.WriteInto(InstanceKey{1, 0, 0}, DType::kF32, {8}, 0, 4, Floats(4)).ok());
  EXPECT_EQ(store.live_bytes(), 32);
  // A slice written into a value shared with another tensor copies it first.
  const Tensor shared = Floats(8);
  store.Put(InstanceKey{2, 0, 0}, shared);
  store.Put(InstanceKey{3, 0, 0}, shared);
  EXPECT_EQ(store.live_bytes(), 64);
  ASSERT_TRUE(store.WriteSlice(InstanceKey{2, 0, 0}, 0, Floats(2)).ok());
  EXPECT_EQ(store.live_bytes(), 96);
  ASSERT_TRUE(store.WriteSlice(InstanceKey{2, 0, 0}, 2, Floats(2)).ok());  // in place now
  EXPECT_EQ(store.live_bytes(), 96);
  store.Erase(2);
  store.Erase(3);
  EXPECT_EQ(store.live_bytes(), 32);
}

}  // namespace
}  // namespace quilt
