// What a rank was doing when a collective failed: the training step and the
// newest checkpoint known to be complete, kept process-wide so that the
// communicators' error reports (the MPI watchdog's, the thread ranks')
// can name them without knowing the training loop.
//
//   progress::set_step(812);                       // the trainer, per step
//   progress::checkpoint_saved("ckpt", 800, true);  // complete (the writer)
//   progress::checkpoint_saved("ckpt", 800, false); // written by another rank:
//   progress::step_done();                          //   complete once a later
//                                                   //   step's collectives ran
//   progress::describe()  // "at step 812; resume from ckpt (its latest: step 800 or newer)"
#pragma once

#include <cstdint>
#include <string>

namespace strata::comm::progress {

// Steps done so far (the step in flight is the next one).
void set_step(std::uint64_t step);
// A checkpoint of `step` in `dir`: complete when this rank wrote it (or
// read it to resume), else pending until step_done() (the writer finished
// it before the collectives of the step after it could complete).
void checkpoint_saved(const std::string& dir, std::uint64_t step, bool complete);
// A step's collectives completed: a pending checkpoint is complete.
void step_done();
// "at step N; resume from DIR (its latest: step S or newer)" or "at step N;
// no checkpoint was completed by this run" (empty before the first step).
std::string describe();
// Forgets everything (tests).
void reset();

}  // namespace strata::comm::progress
