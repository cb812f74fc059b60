// Package diffusion is Alpamayo-R1's action side (NVlabs/alpamayo,
// models/alpamayo_r1.py): after the VLM has reasoned, an action expert
// turns noise into 64 (acceleration, curvature) controls by flow matching,
// and the action space integrates them into a trajectory.
//
// One denoising step (Expert.Velocity) for noisy actions x [64][2] at flow
// time t:
//
//	action_in_proj   Fourier features of x and t → MLP → LayerNorm: 64 tokens
//	expert layer i   Qwen3 decoder layer whose attention reads VLM layer i's
//	                 KV cache rows [0, L) (rows [offset, L) hidden) plus the
//	                 64 tokens' own keys, written to rows [L, L+64); the
//	                 action tokens see each other both ways
//	expert.norm      RMSNorm
//	action_out_proj  Linear(hidden → 2): the velocity
//
// Expert.Sample integrates the velocity with Euler steps from t = 0 to 1
// (Flow); Expert.ActionsToTrajectory and the actionspace sub-package turn
// actions into xyz and rotations; Expert.HistoryTokens encodes the ego
// history for the prompt.
//
// Checkpoint names are the release's: expert.layers.N.*, expert.norm.weight,
// action_in_proj.{sinus.N.freqs, timestep_fourier_encoder.freqs,
// encoder.trunk.{0,2,3,5,6}.*, norm.*}, action_out_proj.{weight,bias},
// action_space.{accel,curvature}_{mean,std}.
package diffusion
