mod generate;

use crate::args::Command;

pub type CliResult = Result<(), Box<dyn std::error::Error>>;

pub fn run(command: Command) -> CliResult {
    match command {
        Command::Generate(args) => generate::run(args),
    }
}
