// Placeholder: implemented in progress.
#include "node/job_runner.h"
