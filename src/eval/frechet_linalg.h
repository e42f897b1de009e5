// The linear algebra shared by the Frechet distances (metrics.cpp: set to set;
// feature_statistics.cpp: set to reference statistics), kept out of metrics.h so that only the
// sources that use Eigen see it.
#pragma once

#include <Eigen/Dense>

namespace tessera {

// Sum of the square roots of a symmetric PSD matrix's eigenvalues (negative rounding clipped):
// tr(M^1/2).
double trace_sqrt_psd(const Eigen::MatrixXd& m);

// A factor L with S = L L^T of a symmetric PSD matrix, from a pivoted LDL^T (negative
// rounding-level pivots clipped): then tr((S T)^1/2) = tr((L^T T L)^1/2) for any PSD T.
Eigen::MatrixXd psd_factor(const Eigen::MatrixXd& s);

// The sum of a matrix's singular values (one-sided Jacobi SVD: Eigen 3.4's divide-and-conquer
// BDCSVD wrote past its stack on bootstrap resamples with repeated rows and crashed `bench
// --methods -n 64`'s quality in an OpenMP thread).
double singular_value_sum(const Eigen::MatrixXd& g);

}  // namespace tessera
