// kiln::nn in one include: Module, layers, containers, attention, losses, init,
// activation checkpointing and training helpers.
#pragma once
#include "nn/attention.h"
#include "nn/checkpoint.h"
#include "nn/container.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/ordered_dict.h"
#include "nn/recurrent.h"
#include "nn/train_utils.h"
#include "nn/serialize.h"
