// Placeholder: implemented in progress.
#include "node/queue_scheduler.h"
