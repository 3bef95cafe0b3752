//! What a routing adapter learned: on routing tasks, the distribution over the four answer
//! letters (the constrained distribution the server samples from), per task and overall.
//!
//! `cargo run --release -p atdp-loop --example probe -- MODEL_DIR [ADAPTER_DIR]`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atdp_loop::Env;
use atdp_model_files::ChatFormat;
use atdp_trainer::{Adapter, LoadOptions, Model, load_adapter};
use candle_core::Tensor;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: probe MODEL_DIR [ADAPTER_DIR]");
        std::process::exit(2);
    }
    let model = Model::load(&args[1], &LoadOptions::default()).unwrap();
    let chat = ChatFormat::load(&args[1]).unwrap();
    let lora = args.get(2).map(|dir| load_adapter(dir, &model).unwrap());
    let letters: Vec<u32> = ["A", "B", "C", "D"]
        .iter()
        .map(|l| chat.encode(l).unwrap()[0])
        .collect();
    for (name, first) in [("train", 0u64), ("held-out", 1_000_000_000)] {
        let (mut right, mut p_right, n) = (0, 0.0, 200);
        let mut by_letter = [[0.0f64; 4]; 4];
        for seed in first..first + n {
            let (messages, answer) = Env::routing_task(seed);
            let ids = atdp_loop::prompt_ids(&chat, &messages).unwrap();
            let len = ids.len();
            let ids = Tensor::new(ids.as_slice(), model.device())
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let adapter = match &lora {
                Some(l) => Adapter::On(l),
                None => Adapter::Off,
            };
            let logits: Vec<f32> = model
                .forward(&ids, adapter)
                .unwrap()
                .get(0)
                .unwrap()
                .get(len - 1)
                .unwrap()
                .to_vec1()
                .unwrap();
            let l: Vec<f64> = letters.iter().map(|&t| logits[t as usize] as f64).collect();
            let max = l.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = l.iter().map(|x| (x - max).exp()).sum();
            let p: Vec<f64> = l.iter().map(|x| (x - max).exp() / z).collect();
            let want = ["A", "B", "C", "D"]
                .iter()
                .position(|x| *x == answer)
                .unwrap();
            let best = (0..4).max_by(|a, b| p[*a].total_cmp(&p[*b])).unwrap();
            right += usize::from(best == want);
            p_right += p[want];
            for k in 0..4 {
                by_letter[want][k] += p[k];
            }
        }
        println!(
            "{name}: argmax right {:.1}%, mean p(right) {:.3}",
            right as f64 / n as f64 * 100.0,
            p_right / n as f64
        );
        for (k, row) in by_letter.iter().enumerate() {
            let total: f64 = row.iter().sum();
            println!(
                "  answer {}: {:?}",
                ["A", "B", "C", "D"][k],
                row.iter()
                    .map(|x| format!("{:.2}", x / total.max(1e-9)))
                    .collect::<Vec<_>>()
            );
        }
    }
}
