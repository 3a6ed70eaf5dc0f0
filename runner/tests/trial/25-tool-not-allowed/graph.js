export const meta = {name: 'tool-not-allowed', slug: 'tool-not-allowed', version: '1'};
export default async function (args, g) {
  return await g.tool("fs.write", {path: "x.txt", text: "y"});
}
