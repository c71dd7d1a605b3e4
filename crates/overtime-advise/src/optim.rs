//! Nelder–Mead: the derivative-free minimiser behind the censored
//! maximum-likelihood fits (a handful of parameters, a smooth likelihood).

/// Minimises `f` from `x0`, with initial steps `step` per coordinate.
/// Stops when the simplex's values agree within `tol` (absolute) or after
/// `max_evals` evaluations. Returns the best point and its value.
pub(crate) fn minimize(
    mut f: impl FnMut(&[f64]) -> f64,
    x0: &[f64],
    step: &[f64],
    tol: f64,
    max_evals: usize,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut eval = |x: &[f64], evals: &mut usize| {
        *evals += 1;
        let v = f(x);
        if v.is_finite() { v } else { f64::INFINITY }
    };
    let mut evals = 0usize;
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    simplex.push((x0.to_vec(), eval(x0, &mut evals)));
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step[i];
        let v = eval(&x, &mut evals);
        simplex.push((x, v));
    }
    // Restarts from the best point guard against a collapsed simplex.
    let mut restarts = 0;
    loop {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[n].1);
        let converged = (worst - best).abs() <= tol * (1.0 + best.abs().min(1.0));
        if evals >= max_evals {
            break;
        }
        if converged {
            if restarts >= 2 {
                break;
            }
            restarts += 1;
            let x0 = simplex[0].0.clone();
            let v0 = simplex[0].1;
            simplex.clear();
            simplex.push((x0.clone(), v0));
            for i in 0..n {
                let mut x = x0.clone();
                x[i] += step[i] * 0.1;
                let v = eval(&x, &mut evals);
                simplex.push((x, v));
            }
            continue;
        }
        let centroid: Vec<f64> = (0..n)
            .map(|j| simplex[..n].iter().map(|(x, _)| x[j]).sum::<f64>() / n as f64)
            .collect();
        let along = |t: f64| -> Vec<f64> {
            (0..n)
                .map(|j| centroid[j] + t * (simplex[n].0[j] - centroid[j]))
                .collect()
        };
        let xr = along(-1.0);
        let vr = eval(&xr, &mut evals);
        if vr < simplex[0].1 {
            let xe = along(-2.0);
            let ve = eval(&xe, &mut evals);
            simplex[n] = if ve < vr { (xe, ve) } else { (xr, vr) };
        } else if vr < simplex[n - 1].1 {
            simplex[n] = (xr, vr);
        } else {
            let (xc, vc) = if vr < simplex[n].1 {
                let x = along(-0.5);
                let v = eval(&x, &mut evals);
                (x, v)
            } else {
                let x = along(0.5);
                let v = eval(&x, &mut evals);
                (x, v)
            };
            if vc < simplex[n].1.min(vr) {
                simplex[n] = (xc, vc);
            } else {
                let b = simplex[0].0.clone();
                for item in simplex.iter_mut().skip(1) {
                    let x: Vec<f64> = (0..n).map(|j| b[j] + 0.5 * (item.0[j] - b[j])).collect();
                    let v = eval(&x, &mut evals);
                    *item = (x, v);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (x, v) = simplex.swap_remove(0);
    (x, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimize_example() {
        let (x, v) = minimize(
            |p| (p[0] - 3.0).powi(2) + (p[1] + 1.0).powi(2) * 10.0,
            &[0.0, 0.0],
            &[1.0, 1.0],
            1e-12,
            5000,
        );
        assert!((x[0] - 3.0).abs() < 1e-4 && (x[1] + 1.0).abs() < 1e-4 && v < 1e-8);
    }

    #[test]
    fn the_rosenbrock_valley_is_followed_to_its_minimum() {
        let (x, _) = minimize(
            |p| (1.0 - p[0]).powi(2) + 100.0 * (p[1] - p[0] * p[0]).powi(2),
            &[-1.2, 1.0],
            &[0.5, 0.5],
            1e-14,
            20_000,
        );
        assert!(
            (x[0] - 1.0).abs() < 1e-3 && (x[1] - 1.0).abs() < 1e-3,
            "{x:?}"
        );
    }
}
