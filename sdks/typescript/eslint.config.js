// ESLint: typescript-eslint's strict, type-aware rules on the SDK, its tests and scripts.
import eslint from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "build/", "node_modules/", "src/gen/"] },
  eslint.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true, allowBoolean: true }],
      // Decorated methods are async or sync by the author's choice; the SDK awaits either.
      "@typescript-eslint/require-await": "off",
    },
  },
  {
    // node:test's test() and describe() return promises the runner tracks itself.
    files: ["test/**/*.ts"],
    rules: { "@typescript-eslint/no-floating-promises": "off" },
  },
  // Plain Node scripts outside the TypeScript project: linted without types.
  { files: ["eslint.config.js", "npm/*.mjs"], ...tseslint.configs.disableTypeChecked },
  { files: ["npm/*.mjs"], languageOptions: { globals: { process: "readonly", console: "readonly" } } },
);
