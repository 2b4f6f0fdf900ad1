/*
 * ssd_case_macros.h — shorthands for th_ssd_case tables (designated initialisers), shared by
 * the tables of test_ssd_cases.c, test_ssd_half.c and ops/ops_ssd.c, ops/ops_stages.c.
 */
#ifndef MAMBA2C_TEST_SSD_CASE_MACROS_H
#define MAMBA2C_TEST_SSD_CASE_MACROS_H

#include <math.h>

#define INF INFINITY
#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g
/* every option but D (set per case) and dt_limit */
#define ALL_BUT_LIMIT .z = 1, .dt_bias = 1, .softplus = 1, .init = 1, .final = 1, .dfinal = 1
/* dt_limit (0.02, 0.08) clips both ends of softplus(U(-4.6,-2.2)) ~ (0.01, 0.105) */
#define ALL_OPTS ALL_BUT_LIMIT, .limit = 1, .lo = 0.02, .hi = 0.08
#define STATES .init = 1, .final = 1, .dfinal = 1
#define GBIT(id) (1u << ((id) - TH_DX))

#endif /* MAMBA2C_TEST_SSD_CASE_MACROS_H */
