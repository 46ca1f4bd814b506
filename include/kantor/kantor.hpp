// Umbrella header: the whole public API of kantor.
#pragma once

#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/io.hpp"
#include "kantor/oracle.hpp"
#include "kantor/potentials.hpp"
#include "kantor/problem.hpp"
#include "kantor/sinkhorn.hpp"
#include "kantor/timer.hpp"
#include "kantor/types.hpp"
#include "kantor/view.hpp"
