# Redraw: cd docs/img && gnuplot torch_backend.gp
set terminal pngcairo size 640,400 font ",10"
set output "torch_backend.png"
set termoption noenhanced
set title "torch.distributed all_reduce: spmd vs gloo backend (2026-11-26, commit 9439b94)"
set logscale xy
set xlabel "bytes"
set xtics ("4" 4, "128" 128, "4K" 4096, "128K" 131072, "4M" 4194304, "64M" 67108864)
set ylabel "time per call (µs)"
set key top left
set grid
plot "torch_backend.dat" using 1:2 with linespoints title "spmd, world 2", \
     "" using 1:3 with linespoints title "gloo, world 2", \
     "" using 1:4 with linespoints title "spmd, world 4", \
     "" using 1:5 with linespoints title "gloo, world 4"
