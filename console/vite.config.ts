import { defineConfig } from "vite";

// Built into the Python package, which serves it at / (podfleet/console).
export default defineConfig({
  base: "/",
  build: {
    outDir: "../podfleet/console/dist",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
});
