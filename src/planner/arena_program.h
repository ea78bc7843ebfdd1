// A DistributedProgram on an arena of its own, for the programs a plan
// lowers and simulates and mostly throws away: the lowering builds it in
// place (LowerOnArena), so that its instructions lie together in memory
// and are freed at once. Copies are deep (on an arena of their own); moves
// keep the arena.
#ifndef QUILT_SRC_PLANNER_ARENA_PROGRAM_H_
#define QUILT_SRC_PLANNER_ARENA_PROGRAM_H_

#include <memory>
#include <utility>

#include "google/protobuf/arena.h"
#include "proto/quilt/v1/program.pb.h"

namespace quilt {

class ArenaProgram {
 public:
  ArenaProgram() = default;
  ArenaProgram(ArenaProgram&& other) noexcept { *this = std::move(other); }
  ArenaProgram& operator=(ArenaProgram&& other) noexcept {
    arena_ = std::move(other.arena_);
    program_ = other.program_;
    other.program_ = nullptr;
    return *this;
  }
  ArenaProgram(const ArenaProgram& other) { *this = other; }
  ArenaProgram& operator=(const ArenaProgram& other) {
    if (this == &other) return *this;
    if (other.program_ == nullptr) {
      program_ = nullptr;
      arena_.reset();
      return *this;
    }
    ArenaProgram copy;
    copy.Adopt(
        google::protobuf::Arena::CreateMessage<quilt::v1::DistributedProgram>(copy.NewArena()));
    copy.program_->CopyFrom(*other.program_);
    return *this = std::move(copy);
  }

  // A fresh arena (the one held before goes, with its program) for the
  // program Adopt then takes.
  google::protobuf::Arena* NewArena() {
    program_ = nullptr;
    google::protobuf::ArenaOptions options;
    options.start_block_size = 64 << 10;
    options.max_block_size = 4 << 20;
    arena_ = std::make_unique<google::protobuf::Arena>(options);
    return arena_.get();
  }
  // `program` lives on the arena NewArena gave.
  void Adopt(quilt::v1::DistributedProgram* program) { program_ = program; }

  bool empty() const { return program_ == nullptr; }
  const quilt::v1::DistributedProgram& operator*() const { return *program_; }
  quilt::v1::DistributedProgram* operator->() { return program_; }
  const quilt::v1::DistributedProgram* operator->() const { return program_; }

 private:
  std::unique_ptr<google::protobuf::Arena> arena_;
  quilt::v1::DistributedProgram* program_ = nullptr;
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_ARENA_PROGRAM_H_
