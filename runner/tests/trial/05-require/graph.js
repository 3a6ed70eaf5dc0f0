export const meta = {name: 'require', slug: 'require', version: '1'};
const fs = require("fs");
export default async function (args, g) {
  return fs.readFileSync("x");
}
