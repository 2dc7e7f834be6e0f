// Umbrella header of kiln's reference models (models/): MLP, LeNet5, ConvNet, ResNet20, GPT.
#pragma once
#include "kiln/models/convnet.h"
#include "kiln/models/gpt.h"
#include "kiln/models/lenet.h"
#include "kiln/models/mlp.h"
#include "kiln/models/resnet.h"
