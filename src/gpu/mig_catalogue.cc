// Placeholder: being implemented.
#include "gpu/mig_catalogue.h"
