// Exercise 4's test: scaler_update against kiln's GradScaler over a random run of clean and
// overflowing steps (the real scaler sees real inf gradients and skips those steps).
#include <doctest/doctest.h>
#include <cmath>
#include <random>
#include <kiln/kiln.h>
#include "exercise.h"

TEST_CASE("exercise 4: scaler_update follows GradScaler step by step") {
  const kiln::optim::GradScalerOptions o{.init_scale = 1024.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                                         .growth_interval = 3};
  kiln::optim::GradScaler scaler(o);
  kiln::Tensor p = kiln::zeros({4}).requires_grad_();
  kiln::optim::SGD opt({p}, {.lr = 0.0});
  ScalerState mine{o.init_scale, 0};
  std::mt19937 rng(4);
  int overflows = 0, growths = 0;
  for (int step = 0; step < 60; ++step) {
    const bool inf = rng() % 4 == 0;
    p.set_grad(kiln::full({4}, inf ? INFINITY : 1.0));
    scaler.step(opt);
    scaler.update();
    const double before = mine.scale;
    mine = scaler_update(mine, inf, o.growth_factor, o.backoff_factor, o.growth_interval);
    overflows += inf;
    growths += mine.scale > before;
    CAPTURE(step);
    CHECK(mine.scale == scaler.get_scale());
    CHECK(mine.growth_tracker == scaler.growth_tracker());
  }
  CHECK(overflows > 5);  // the run exercised both rules
  CHECK(growths > 3);
}
