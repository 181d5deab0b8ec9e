// Lanes for a stage's steps: which independent queue of the device (a CUDA stream) each step runs on, which
// other lanes' steps it must wait for first, and from which step on its work is known to be complete on every
// lane, which is what memory reuse needs once steps run concurrently.
//
// The rule is chains: a step continues the lane whose last step it reads (the lowest such lane when it reads
// the last steps of several: a join); a step that reads no lane's last step starts a chain on the lane used
// least recently. So the image and text streams of a FLUX double block, two chains between the joint
// attention and the end, run side by side, and a straight chain stays on lane 0. A step waits for a step of
// another lane that it reads, unless its lane is already ordered after that step; the wait is on an event the
// step recorded as it was launched (backend.h), so it covers that step and what its lane ran before it, not
// what the lane was given since. The stage begins with every lane waiting for lane 0 and ends with lane 0
// waiting for every lane (fork and join).
#pragma once

#include <vector>

namespace kiln::backend {

struct LaneSchedule {
  std::vector<int> lane;                // per step
  std::vector<std::vector<int>> waits;  // per step: the steps (of other lanes) it waits for before it runs
  std::vector<bool> signals;            // per step: another lane waits for it (it records its event)
  // Per step i: the first index from which every later step is ordered after step i (i + 1 on one lane;
  // the stage's size when some later step of another lane never waits past it).
  std::vector<int> complete_before;
  int lanes_used = 1;
  int waits_total = 0;
};

// `reads[i]`: the steps (indices < i in the stage) whose outputs step i reads. `lanes` >= 1.
LaneSchedule schedule_lanes(const std::vector<std::vector<int>>& reads, int lanes);

}  // namespace kiln::backend
