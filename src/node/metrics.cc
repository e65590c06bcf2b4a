// Placeholder: implemented in progress.
#include "node/metrics.h"
