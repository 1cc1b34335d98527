// Whether the user's file stated a setting. An unstated one takes its default, or the setting of
// the job's software stack where the stack's calibration was measured with another one
// (job/stacks.hpp, "stack_settings"). Not part of the value's identity: two plans or trainings
// that differ only in what their files spelled out compare equal.
#pragma once

namespace mist {

struct Stated {
  bool value = true;  // false: the file left the setting out
  bool operator==(const Stated&) const { return true; }
};

}  // namespace mist
