// The CUDA backend (backend/backend.h) on the pieces in this folder: device memory and launches through the
// driver API, generated kernels (the emitter's CUDA dialect) compiled by NVRTC, GEMMs through cuBLASLt and
// attention through cuDNN. `register_cuda_backend` makes `make_backend("cuda")` find it; binaries linked with
// kiln_cuda call it at start.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kiln::cuda {

// Opens device 0 and measures its copy bandwidth and bf16 GEMM rate (a few milliseconds).
Result<std::unique_ptr<backend::Backend>> make_cuda_backend();
void register_cuda_backend();

// The backend picks each GEMM shape's algorithm on its first run by timing cuBLASLt's heuristic answers and their
// neighbours (a 50 ms warm-up, 3 interleaved screening rounds, then 7 rounds of 3 launches each for the fastest 8;
// cuda_backend.cpp). The audit times every chosen shape's candidates again on the buffers of the call that chose,
// interleaved over `reps` rounds (median of 3 launches per round), so that the choice can be judged against the
// best of them ("each GEMM within 3% of the best algorithm"). The fastest of 160 noisy medians is biased low (a
// winner's curse), so the chosen algorithm and the three fastest others that agree with the heuristic's first
// answer (BlasLt::agrees) are then timed again head to head over 3 x `reps` rounds: that is the verdict. It
// overwrites those calls' outputs: run the plan again before reading them. A benchmark, not for serving.
struct GemmAudit {
  std::string desc;                 // GemmDesc::str()
  int candidates = 0;
  int chosen = 0;                   // index into candidate_ms of the algorithm the backend runs
  int disagreements = 0;            // faster candidates passed over: their output disagreed with the first choice
  int heuristic = 0;                // how many of the candidates are cuBLASLt's heuristic answers (the first ones)
  std::string chosen_config;        // the chosen algorithm's configuration (gemm.cpp describe)
  int best = 0;                     // index of the fastest finalist
  double flops = 0;
  std::vector<double> candidate_ms; // median per candidate, all timed together
  std::vector<int> finalists;       // the chosen candidate first, then up to 3 others: timed again head to head
  std::vector<double> finalist_ms;  // their medians, in that order
  std::vector<int> refused;         // fast candidates left out of the finalists: their output disagreed
  double chosen_over_best() const {
    return finalist_ms.front() / *std::min_element(finalist_ms.begin(), finalist_ms.end());
  }
  // The same ratio read from the first pass alone (biased up by the minimum over all candidates).
  double screen_chosen_over_best() const {
    return candidate_ms[static_cast<size_t>(chosen)] / *std::min_element(candidate_ms.begin(), candidate_ms.end());
  }
};
Result<std::vector<GemmAudit>> audit_gemm_choices(backend::Backend& cuda, int reps = 10);

// Makes the backend run candidate `candidate` (an index into the audit's candidate_ms) for the GEMM shape `desc`
// (GemmAudit::desc) from now on: launches and captures that follow use it; graphs captured before keep theirs.
// A neighbour of cuBLASLt's heuristic answers must first agree with the first answer on the buffers of the call
// that chose (BlasLt::agrees). For measuring choices inside a whole plan (kiln-gpu-bench); errors name the shape.
Status force_gemm_choice(backend::Backend& cuda, const std::string& desc, int candidate);

}  // namespace kiln::cuda
