// Placeholder: implemented in progress.
#include "node/store.h"
