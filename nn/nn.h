// kiln::nn in one include: Module, layers, containers, attention, losses, init,
// activation checkpointing and training helpers.
#pragma once
#include "kiln/nn/attention.h"
#include "kiln/nn/checkpoint.h"
#include "kiln/nn/container.h"
#include "kiln/nn/distributions.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/module.h"
#include "kiln/nn/ordered_dict.h"
#include "kiln/nn/parametrize.h"
#include "kiln/nn/recurrent.h"
#include "kiln/nn/train_utils.h"
#include "kiln/nn/serialize.h"
