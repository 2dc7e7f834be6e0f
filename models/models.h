// Umbrella header of kiln's reference models (models/): MLP, LeNet5, ConvNet, ResNet20, GPT.
#pragma once
#include "models/convnet.h"
#include "models/gpt.h"
#include "models/lenet.h"
#include "models/mlp.h"
#include "models/resnet.h"
