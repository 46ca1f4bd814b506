// The multiscale solver's Gaussian lift (docs/multiscale.md, step 3): a coarse level's cells as
// Gaussian blobs of their points' spread around the coarse plan's map, written as a squared-
// Euclidean problem in one more coordinate so that every engine runs it as it is.
//
// A lift takes the coarse potentials to the points of the finer level by one c-transform per
// side, g_j = -eps log sum_I a_I exp((f_I - C(x_I, y_j)) / eps) over the other side's cells.
// The cell's centroid x_I stands for its points x_i = x_I + delta_i, whose potentials are
// f_i ~ f_I + <grad f_I, delta_i> with grad f_I = 2 c (x_I - T_I), T_I the coarse plan's
// barycentric image of the cell (the gradient of the coarse c-transform at x_I). With the
// deltas an isotropic Gaussian of per-coordinate variance s (the cell's spread), the sum over
// the cell's points of exp((f_i - c |x_i - y|^2) / eps) is the centroid's term times
//
//   E exp((2 c <y - T_I, delta> - c |delta|^2) / eps)
//     = (1 + 2 c s / eps)^(-d/2) exp(kappa |y - T_I|^2 / eps),  kappa = 2 c^2 s / (eps + 2 c s)
//
// (the Gaussian integral, exact for Gaussian deltas). So the lift's score of (cell I, point y)
// gains kappa_I |y - T_I|^2 + shift_I, shift_I = -(d eps / 2) log(1 + 2 c s_I / eps): a cell's
// kernel is wider than its centroid's by its spread (at 2^20 points in cells of 8,
// s / eps ~ 0.03; the plain lift's first column error was 5.9e-3 against a 5e-3 tolerance).
//
// The engines evaluate c |q - k|^2 + potentials only, so the score is written in one more
// coordinate, on centred coordinates (p - mid): point q = (p, |p|^2); cell key
// k = (x - (kappa / c) T, kappa / (2 c)); the key's potential f_I + shift'_I with
// shift'_I = shift_I - c |x|^2 + kappa |T|^2 + c |k|^2. Then
//   f_I + shift'_I - c |q - k|^2 = f_I - c |x - p|^2 + kappa |p - T|^2 + shift_I - c |p|^4,
// and the lifted potential is the engine's c-transform minus c |p|^4 (the row shift).
#pragma once

#include <cstdint>
#include <vector>

#include "kantor/uninit_vector.hpp"

namespace kantor::multiscale {

/// The Gaussian model's largest 2 c s / eps: a cell of a few points has no Gaussian tails, so
/// the model's growth kappa |y - T|^2 away from the image outgrows the cell's true term (bounded
/// by its extent) once its spread nears eps / c. Wider cells (Morton cells that straddle two
/// regions: at 2^20 points 1% of the cells of 8 are past 0.7, the widest near 100) take the
/// model at this ratio. On the data at 4,096 points (numpy; the lifted g_0, one f update
/// over every pair, the column error of (f_1, g_0)), with every cell at about the same ratio:
/// at 0.06 the clip changes nothing (Gaussian 4.1e-3 against 9.2e-3 for the centroids); at 0.25,
/// 0.64 and 2.6 it gives 3.1e-2, 8.2e-2 and 0.37 against 4.5e-2, 0.14 and 0.53 (unclipped: 3.1e-2,
/// 7.6e-2 and 0.60). At 2^20 points (CPU) the wide cells matter: the clip certified (f_1, g_0)
/// at 4.48e-3, the centroid's kernel for cells past 0.5 left 5.14e-3 (tolerance 5e-3).
constexpr double kMaxCellRatio = 1.0;

/// The finest level takes the Gaussian lift, and runs its first f update on the certificate's
/// row side, where its cells' median 2 c s / eps is at most this: there its first pair
/// (f_1, g_0) can meet the tolerance, and that is all the lift buys (after one Sinkhorn
/// iteration both starts sit on the same slow modes). On the data (tolerance 5e-3): at
/// 2^20 points (median 0.04) (f_1, g_0) certified at 4.48e-3 after two passes where the
/// centroids' lift took three; at 2^17 (median 0.17) its column error was 2.1e-2 against 3.5e-2,
/// the level took three iterations either way, certified at 4.92e-3 against 4.68e-3, and the
/// row side's extra cost (on the CPU engine 1.3 s of a 7.7 s solve) bought nothing. (Mixing the
/// two kernels, most cells past the clip, made the first pair worse: 16,384 points, median
/// 0.36-0.69, 0.203 against 0.165.)
constexpr double kMaxMedianCellRatio = 0.1;

/// The probe's verdict (docs/multiscale.md, step 3, "The probe"): the Gaussian lift's g on the
/// coarse level's own y cells, `probe` (the engine's c-transform of the lift's keys, before its
/// row shift `row_shift` is subtracted), against the coarse solution's g there, `coarse`. A cell
/// whose Gaussian g lies delta = (coarse - (probe - row_shift)) / eps below the coarse one is
/// credited e^delta times its mass; the excess sum_J b_J (e^delta_J - 1)_+ / sum_J b_J (each
/// delta capped at 50, cells of zero weight skipped; NaN for a NaN delta, a weight that is not
/// finite, or no weight at all) is the share of the columns' mass the
/// lift would credit beyond the centroids' kernels. Smooth maps (the data at 2^20 points,
/// 131,072 cells: every delta below 0.05, excess 1.3e-3; 2-D, 2,048 cells: 6.9e-4) keep it far
/// below a tolerance; mass carried between clusters (8 clusters, 2,048 cells: median delta 81,
/// excess 3.6e21) does not. The finest level takes the lift where the excess is at most its
/// tolerance.
double lift_excess(const double* coarse, const double* probe, const double* row_shift,
                   const double* b, std::int64_t count, double eps);

/// The median of 2 c s / eps over a level's cells (NaN for none).
double median_cell_ratio(const std::vector<double>& spread, double c, double eps);

/// A cell's Gaussian terms for cost scale c, eps, dimension d and per-coordinate spread s >= 0,
/// with r = min(2 c s / eps, kMaxCellRatio): kappa = c r / (1 + r) (= 2 c^2 s / (eps + 2 c s)
/// below the clip) and shift = -(d eps / 2) log(1 + r). Zero spread gives zeros (the centroid's
/// own kernel).
struct CellKernel {
  double kappa = 0;
  double shift = 0;
};
CellKernel gaussian_cell(double c, double eps, int d, double spread);

/// The lift's queries: rows (p - mid, |p - mid|^2) of n x (d + 1), and the row shift
/// c |p - mid|^4 to subtract from the engine's c-transform. Every entry written by the host
/// threads, none zero-filled first (20 MB at 2^20 points in fp32).
template <class T>
void lift_queries(const T* p, std::int64_t n, int d, const double* mid, double c, int threads,
                  detail::UninitVector<T>* queries, detail::UninitVector<T>* row_shift);

/// The lift's keys for K cells (centroids `cells`, K x d; spreads; the coarse plan's images
/// `images` (K x d, the unnormalized sums sum_J P_IJ z_J) and masses `mass` (sum_J P_IJ)):
/// rows (x - mid - (kappa / c) (T - mid), kappa / (2 c)) of K x (d + 1) and the potential shifts
/// shift'_I. A cell without a usable image (mass not positive, or a non-finite image) keeps its
/// centroid's kernel: kappa = 0, shift = 0.
template <class T>
void lift_keys(const T* cells, const double* spread, const double* images, const double* mass,
               std::int64_t K, int d, const double* mid, double c, double eps, int threads,
               std::vector<T>* keys, std::vector<double>* pot_shift);

}  // namespace kantor::multiscale
