//! The named model sizes, as the usual guides have them, on the chapter's input (256 features)
//! and classes (10).

use crate::arch::{Arch, CLASSES, INPUT};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// 3 hidden layers of 16.
    Small,
    /// 6 hidden layers of 64.
    Medium,
    /// 12 hidden layers of 128.
    Large,
}

impl Preset {
    pub const ALL: [Preset; 3] = [Preset::Small, Preset::Medium, Preset::Large];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Small => "small",
            Preset::Medium => "medium",
            Preset::Large => "large",
        }
    }

    pub fn arch(self) -> Arch {
        let (depth, hidden) = match self {
            Preset::Small => (3, 16),
            Preset::Medium => (6, 64),
            Preset::Large => (12, 128),
        };
        Arch {
            input: INPUT,
            hidden,
            depth,
            classes: CLASSES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_grow_in_depth_and_width() {
        let archs: Vec<Arch> = Preset::ALL.iter().map(|p| p.arch()).collect();
        assert_eq!((archs[0].depth, archs[0].hidden), (3, 16));
        assert_eq!((archs[1].depth, archs[1].hidden), (6, 64));
        assert_eq!((archs[2].depth, archs[2].hidden), (12, 128));
        assert!(archs.iter().all(|a| a.validate().is_ok()));
        assert!(archs
            .windows(2)
            .all(|w| w[0].param_count() < w[1].param_count()));
        assert_eq!(Preset::Large.name(), "large");
    }
}
