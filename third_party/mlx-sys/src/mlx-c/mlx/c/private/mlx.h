#include <cstdarg>
#include <cstring> // for strncpy

#include "mlx/c/private/array.h"
#include "mlx/c/private/closure.h"
#include "mlx/c/private/compile.h"
#include "mlx/c/private/device.h"
#include "mlx/c/private/distributed_group.h"
#include "mlx/c/private/enums.h"
#include "mlx/c/private/export.h"
#include "mlx/c/private/gguf.h"
#include "mlx/c/private/graph_utils.h"
#include "mlx/c/private/io.h"
#include "mlx/c/private/map.h"
#include "mlx/c/private/stream.h"
#include "mlx/c/private/string.h"
#include "mlx/c/private/vector.h"
