//! The optimizers the step runs over the flat parameter vector, and their settings.

use serde::{Deserialize, Serialize};

/// The optimizer and its settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Optimizer {
    /// SGD; momentum 0 is plain SGD (no velocity buffer).
    Sgd { momentum: f32, weight_decay: f32 },
    /// AdamW (decoupled weight decay), PyTorch's defaults for the betas and epsilon.
    AdamW {
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

impl Optimizer {
    /// Plain SGD: `p -= lr * g`.
    pub const PLAIN_SGD: Optimizer = Optimizer::Sgd {
        momentum: 0.0,
        weight_decay: 0.0,
    };

    pub fn adamw_default() -> Optimizer {
        Optimizer::AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }

    /// fp32 state buffers per parameter: SGD none, momentum one, AdamW two.
    pub fn state_copies(&self) -> usize {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => 0,
            Optimizer::Sgd { .. } => 1,
            Optimizer::AdamW { .. } => 2,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum == 0.0 => "sgd".into(),
            Optimizer::Sgd { momentum, .. } => format!("sgd (momentum {momentum})"),
            Optimizer::AdamW { .. } => "adamw".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimizer_state_copies() {
        let plain = Optimizer::Sgd {
            momentum: 0.0,
            weight_decay: 0.0,
        };
        let mom = Optimizer::Sgd {
            momentum: 0.9,
            weight_decay: 0.0,
        };
        assert_eq!(plain.state_copies(), 0);
        assert_eq!(mom.state_copies(), 1);
        assert_eq!(Optimizer::adamw_default().state_copies(), 2);
        assert_eq!(Optimizer::PLAIN_SGD, plain);
        assert_eq!(plain.name(), "sgd");
    }
}
