// Placeholder: implemented in progress.
#include "node/http_server.h"
