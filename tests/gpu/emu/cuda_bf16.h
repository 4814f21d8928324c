/* The CPU emulator's bf16 types live in emu_device.h (included by cuda_runtime.h). */
#include "cuda_runtime.h"
