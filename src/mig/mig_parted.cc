// Placeholder: being implemented.
#include "mig/mig_parted.h"
