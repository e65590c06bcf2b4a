// Placeholder: being implemented.
#include "mig/planner.h"
