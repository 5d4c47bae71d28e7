//! `run` on a fair semaphore: `--flow`, `--class` and `--weight` name the run's place in it,
//! `--classes` (with `--capacity`) creates it fair. Bad values are refused while parsing
//! (exit 64), before any store is contacted.

use crate::common::Failure;
use clap::Args;
use clusterlimit::fair::{Classes, FairTag};
use clusterlimit::{AcquireOptions, Error};

/// The fair-semaphore flags of `run`.
#[derive(Debug, Args)]
pub struct FairArgs {
    /// On a fair semaphore: the flow (tenant, user, job family) this run belongs to. Flows
    /// share the semaphore by weight: one flow's many waiting runs delay another flow's next
    /// run by at most one grant. Default: the flow "default".
    #[arg(long, value_name = "FLOW", value_parser = flow_name)]
    pub flow: Option<String>,
    /// On a fair semaphore: the class (priority level) to wait in, one of the semaphore's
    /// classes. Default: its first class.
    #[arg(long, value_name = "CLASS", value_parser = class_name)]
    pub class: Option<String>,
    /// On a fair semaphore: the weight of this run's flow (1 to 1000000, default 1); a flow of
    /// weight 2 gets twice the permits of a flow of weight 1 while both wait.
    #[arg(long, value_name = "W", value_parser = super::numbers::whole::<u32>(1, 1_000_000), allow_negative_numbers = true)]
    pub weight: Option<u32>,
    /// Create the semaphore fair, with these classes in priority order, each NAME=SHARE (a
    /// number of permits, a percent or a fraction of the capacity, guaranteed to it) or NAME
    /// (guaranteed nothing), e.g. "critical=25%,batch". Needs --capacity.
    #[arg(long, value_name = "TABLE", requires = "capacity", conflicts_with = "adaptive", value_parser = classes_table)]
    pub classes: Option<Classes>,
}

impl FairArgs {
    /// Whether the run names its flow, class or weight.
    pub fn tagged(&self) -> bool {
        self.flow.is_some() || self.class.is_some() || self.weight.is_some()
    }

    /// Checks `--classes` against `--capacity` (their guaranteed permits must fit).
    pub fn check(&self, capacity: Option<u32>) -> Result<(), Failure> {
        if let (Some(classes), Some(capacity)) = (&self.classes, capacity) {
            classes.check(capacity).map_err(|e| {
                Failure::usage(format!(
                    "--classes {classes} with --capacity {capacity}: {}",
                    reason(e)
                ))
            })?;
        }
        Ok(())
    }

    /// `opts` with the run's flow, class and weight.
    pub fn apply(&self, mut opts: AcquireOptions) -> AcquireOptions {
        if let Some(flow) = &self.flow {
            opts = opts.flow(flow.clone());
        }
        if let Some(class) = &self.class {
            opts = opts.class(class.clone());
        }
        if let Some(weight) = self.weight {
            opts = opts.weight(weight);
        }
        opts
    }

    /// The failure for a refused acquire: a plain semaphore said in the flags' words.
    pub fn refused(&self, e: Error, semaphore: &str) -> Result<Failure, Error> {
        match e {
            Error::InvalidArgument(why) if self.tagged() && why.contains("plain FIFO") => {
                Ok(Failure::usage(format!(
                    "semaphore {semaphore:?} is a plain FIFO semaphore: --flow, --class and \
                     --weight need a fair one (create it with --classes and --capacity)"
                )))
            }
            e => Err(e),
        }
    }
}

/// The library's reason, without the error's own prefix.
fn reason(e: Error) -> String {
    match e {
        Error::InvalidArgument(why) => why,
        e => e.to_string(),
    }
}

fn flow_name(text: &str) -> Result<String, String> {
    FairTag::new(text).check().map_err(reason)?;
    Ok(text.to_string())
}

fn class_name(text: &str) -> Result<String, String> {
    FairTag::default().class(text).check().map_err(reason)?;
    Ok(text.to_string())
}

fn classes_table(text: &str) -> Result<Classes, String> {
    text.parse::<Classes>().map_err(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tables_are_checked_with_reasons() {
        assert_eq!(flow_name("tenant-a"), Ok("tenant-a".to_string()));
        assert!(flow_name("").unwrap_err().contains("1-128 bytes"));
        assert!(class_name("a\tb")
            .unwrap_err()
            .contains("control character"));
        assert_eq!(
            classes_table("critical=25%,batch").unwrap().to_string(),
            "critical=25%,batch=0"
        );
        assert!(classes_table("a=x")
            .unwrap_err()
            .contains("not a number of permits"));
        let args = FairArgs {
            flow: None,
            class: None,
            weight: None,
            classes: Some(classes_table("a=3,b=3").unwrap()),
        };
        let e = args.check(Some(4)).unwrap_err();
        assert_eq!(e.code, crate::common::exit::USAGE);
        assert!(
            e.message
                .starts_with("--classes a=3,b=3 with --capacity 4: "),
            "{}",
            e.message
        );
        assert!(args.check(Some(6)).is_ok());
    }
}
