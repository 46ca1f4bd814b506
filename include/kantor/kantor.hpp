// Umbrella header: the public API of the kantor library (target kantor::kantor). File formats
// (npy, csv) are a separate library: include "kantor/io.hpp" and link kantor::io.
#pragma once

#include "kantor/buffer.hpp"
#include "kantor/config.hpp"
#include "kantor/context.hpp"
#include "kantor/derivatives.hpp"
#include "kantor/error.hpp"
#include "kantor/info.hpp"
#include "kantor/newton.hpp"
#include "kantor/ot_objectives.hpp"
#include "kantor/oracle.hpp"
#include "kantor/potentials.hpp"
#include "kantor/problem.hpp"
#include "kantor/sinkhorn.hpp"
#include "kantor/timer.hpp"
#include "kantor/types.hpp"
#include "kantor/view.hpp"
